"""The node registry: which node workers beat lately, with their labels (`workflow.py`)."""
