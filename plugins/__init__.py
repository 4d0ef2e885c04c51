"""Built-in plugins, one module each, declared as entry points exactly as a third party would.

Each imports only from :mod:`progressive_compactor.plugin` (HTTP summarizers also from
:mod:`progressive_compactor.http`), never from another plugin module.
"""
