"""Bundled YAML configs, read with ``load_config("default")`` and friends."""
