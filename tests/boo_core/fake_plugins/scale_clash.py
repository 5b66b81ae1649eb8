"""A second plugin claiming the ``scale`` command keyword, under another op name."""

from dataclasses import replace

from boo_core import hookimpl

from .scale_op import SPEC


@hookimpl
def boo_register_ops(register):
    register(replace(SPEC, name="scale_again"))
