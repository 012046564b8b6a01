"""Training config files read within bounds, before anything walks them: a config must be a
regular file (a FIFO or a device would block its reader, or never end), of at most
:data:`MAX_CONFIG_BYTES`, whose YAML holds at most :data:`MAX_CONFIG_NODES` nodes once its
aliases are expanded (a 1 kB "billion laughs" file expands to 10^9: every later walk, the
allow-list's and the parser's, would never end). Each refusal is one line
(:class:`ConfigFileError`)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["MAX_CONFIG_BYTES", "MAX_CONFIG_NODES", "ConfigFileError", "read_config_text", "load_config_yaml",
           "check_regular_file"]

#: The largest config file read (the shipped ones are under 4 kB).
MAX_CONFIG_BYTES = 1 << 20
#: The most YAML nodes a config may expand to, aliases expanded (the shipped ones: under 200).
MAX_CONFIG_NODES = 100_000


class ConfigFileError(ValueError):
    """A config that is not a regular file, too large, or expands to too many nodes (one line)."""


def check_regular_file(path, what: str = "config") -> os.stat_result:
    """``os.stat`` of ``path`` (links followed); ConfigFileError when it is not a regular file
    (never opened: a FIFO's reader blocks, a device's never ends); FileNotFoundError as ``os.stat``."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise ConfigFileError(f"{what} {path} is {kind}: a config is read from a regular file; nothing was run")
    return st


def read_config_text(path, what: str = "config") -> str:
    """The text of the config file ``path`` (UTF-8, undecodable bytes replaced), after
    :func:`check_regular_file` and the size bound (ConfigFileError); at most
    :data:`MAX_CONFIG_BYTES` + 1 bytes are read whatever the file claims."""
    st = check_regular_file(path, what)
    too_big = ConfigFileError(f"{what} {path} is larger than {MAX_CONFIG_BYTES // 1024} KiB ({st.st_size} bytes): "
                              "not a training config; nothing was run")
    if st.st_size > MAX_CONFIG_BYTES:
        raise too_big
    with open(path, "rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:  # it grew since
        raise too_big
    return data.decode("utf-8", errors="replace")


def _expanded_nodes(root, limit: int) -> int:
    """The number of nodes of the YAML node graph ``root`` with every alias expanded (a shared
    node counted once per reference), stopping above ``limit``; -1 for a recursive alias.
    O(distinct nodes): each node's expanded count is computed once."""
    import yaml

    counts, active = {}, set()

    def children(node):
        if isinstance(node, yaml.SequenceNode):
            return node.value
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            counts[key] = min(limit + 1, 1 + sum(counts[id(c)] for c in children(node)))
            continue
        if key in counts:
            continue
        if key in active:
            return -1
        active.add(key)
        stack.append((node, True))
        for c in children(node):
            if id(c) in active:
                return -1
            if id(c) not in counts:
                stack.append((c, False))
    return counts[id(root)]


def load_config_yaml(text: str, where: str):
    """``yaml.safe_load(text)`` once its node graph is known to expand to at most
    :data:`MAX_CONFIG_NODES` nodes (composing shares an alias's node: linear in the text);
    ConfigFileError naming ``where`` otherwise; yaml.YAMLError as PyYAML raises it."""
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return None
    n = _expanded_nodes(root, MAX_CONFIG_NODES)
    if n < 0:
        raise ConfigFileError(f"{where} holds a recursive YAML alias (a value that contains itself): not a training "
                              "config; nothing was run")
    if n > MAX_CONFIG_NODES:
        raise ConfigFileError(f"{where} expands to more than {MAX_CONFIG_NODES} YAML nodes once its aliases are "
                              "expanded (an alias bomb?): not a training config; nothing was run")
    return yaml.safe_load(text)


def is_config_path(value) -> bool:
    """Whether ``value`` names something on disk (a file, a FIFO, a device, a folder): what
    jsonargparse would open as a config; False for text that cannot be a path."""
    try:
        return isinstance(value, (str, os.PathLike)) and os.path.exists(Path(value).expanduser())
    except (OSError, ValueError):
        return False
