"""The worked solutions, one module per notebook: left out of a student build (``python3 dev.py class``)."""
