"""The application: settings, composition, process mains, the command line and the operator's commands.

It sits on top of every other layer (tests/test_layers.py): it imports the services and the library,
and nothing below imports it."""
