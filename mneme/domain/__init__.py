"""The pure domain: validation, decide (command → events) and evolve (event → state). No I/O."""
