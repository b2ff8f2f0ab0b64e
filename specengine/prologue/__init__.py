"""Prologues: input specs, the guards of a solved entry as generated Python, explanations of failed guards. May
import `ops`, `ir`, `marks`, `constraints` and the leaves; never `executors`, `capture` or above."""
