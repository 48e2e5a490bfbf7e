"""The course: what each notebook needs beyond the general library, one module per notebook.

The module of notebook ``notebooks/NN_topic.ipynb`` is ``hooklab.course.nbNN_topic``: that
notebook's small models, lab helpers, exercises (checkers) and worked solutions, and nothing
another notebook uses. What two notebooks share lives in a module named for what it is:

* :mod:`hooklab.course.data`: small seeded models, the sample photograph, thread pinning;
* :mod:`hooklab.course.shapes`: the images drawn in code and the tiny CNN of notebooks 06 and 07.

The general library (``hooklab``: hooks, selection, recording, tracing, inspection, the live
panel, checkers, plots) never imports from here.
"""
