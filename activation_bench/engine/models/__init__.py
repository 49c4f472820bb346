"""Model families: each family one module, asked through the registry."""
