"""The stack tier: the functions, emulators and fakes as real processes (the suite's stack, or stacks of their own)."""
