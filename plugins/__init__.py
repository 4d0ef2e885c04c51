"""Built-in plugins, one module each, declared as entry points exactly as a third party would."""
