"""The exercises of each notebook, with their checkers and worked solutions.

One module per notebook (``hooklab.exercises.tensor_hooks`` for 02, ...); each defines
:class:`hooklab.checker.Exercise` objects that the notebook's exercise cells call
``.check(your_function)`` and ``.solution()`` on.
"""
