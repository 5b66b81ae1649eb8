"""A plugin that hands register() something that is not an OpSpec."""

from boo_core import hookimpl


@hookimpl
def boo_register_ops(register):
    register({"name": "dict_op"})
