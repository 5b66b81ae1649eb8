"""A plugin whose import fails."""

raise ImportError("this plugin is broken on purpose")
