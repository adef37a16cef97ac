"""Tests of RL on language models: group advantages, token terms, the Tunix plug-in."""
