"""Group-relative advantages: the rewards of G answers per prompt, each against its group."""
