"""The search's default learning rates, in a module with no imports so that `actbench --help` can
show them without loading the search."""

LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)  # the judgement's grid: half-decades around Adam's useful range
SCREEN_LRS = (3e-3, 3e-2)  # rung 1's: a decade apart, inside the grid
