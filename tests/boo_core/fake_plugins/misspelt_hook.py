"""A plugin implementing a hook that does not exist (a typo of boo_register_ops)."""

from boo_core import hookimpl


@hookimpl
def boo_register_opz(register):
    pass
