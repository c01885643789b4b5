"""gpumix.agent: the in-rank training agent.

Importing it must stay light (no textual, plotext or pynvml): it runs inside
every training process.
"""
