"""Figure scripts: they read results/ only and write figures/out/<gpu>/. Nothing here measures."""
