#!/usr/bin/env bash
# A real one-node SLURM on this machine, for checking `--launcher submitit_slurm` (requeue after
# `scontrol requeue`, a time limit, preemption) by hand. Not run by CI or the tests.
#
#   sudo bash tools/slurm_one_node.sh          # install (Debian 12), configure, start
#   sudo bash tools/slurm_one_node.sh stop     # stop the daemons it started
#
# One node named after `hostname -s` with all its CPUs, a partition `debug` (the default) and a
# partition `high` whose jobs preempt debug's (PreemptMode=REQUEUE), JobRequeue=1. Made for containers: no systemd (daemons started directly), no cgroups
# (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none), no accounting database.
# Needs root. Written and checked 2026-11-26 on Debian 12 (slurm-wlm 22.05.8, munge 0.5.15).
set -euo pipefail

if [[ "${1:-}" == "stop" ]]; then
    for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/munge/munged.pid; do
        [[ -f "$pidfile" ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge
fi

node=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)

mkdir -p /etc/slurm /run/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown slurm:slurm /var/spool/slurmctld /var/log/slurm /run/slurm
chown munge:munge /run/munge

cat > /etc/slurm/slurm.conf <<EOF
ClusterName=onenode
SlurmctldHost=${node}
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=30
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=${node} CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=debug Nodes=${node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
# a job sent here (-p high) preempts (requeues) debug's jobs when it needs their CPUs
PartitionName=high Nodes=${node} MaxTime=INFINITE State=UP PriorityTier=2
EOF

# munge: a key (the package makes one), then the daemon
[[ -s /etc/munge/munge.key ]] || mungekey --create
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c "/usr/sbin/munged"
munge -n | unmunge >/dev/null

if pgrep -x slurmctld >/dev/null; then scontrol reconfigure; else slurmctld; fi
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 30); do
    sinfo -h -o %T 2>/dev/null | grep -qx idle && break
    sleep 1
done
sinfo
srun -N1 -n1 hostname
