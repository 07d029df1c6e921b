"""Pure job lifecycle: states, settings, retry policy and decisions.

Nothing here does I/O or reads the time: the clock's value and the random source are
passed in, so every rule (R-1 to R-14 of docs/rules.md) is testable with plain values.
"""
