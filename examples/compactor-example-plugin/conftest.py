# One line gives this package's tests the `compactor_factory` fixture of progressive-compactor:
# compactors whose offloaded files, records and state live in each test's tmp_path.
pytest_plugins = ["progressive_compactor.testing"]
