"""The tests, one folder per subpackage of hiseg/ (DEVELOPING.md). Each folder is a package so that two
folders may hold test files of the same name; the helpers beside this file (``_graphs.py``...) are imported
by their own name (pyproject.toml puts tests/ on the path)."""
