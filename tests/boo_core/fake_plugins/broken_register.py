"""A plugin whose registration hook raises."""

from boo_core import hookimpl


@hookimpl
def boo_register_ops(register):
    raise RuntimeError("registration exploded on purpose")
