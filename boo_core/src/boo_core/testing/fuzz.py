"""Property-based fuzzing of an op's commands (needs ``hypothesis``, a test dependency).

:func:`commands` draws MIOpenDriver-style command lines for one registered op from its
flag table alone (``entry.spec.parser.flags``), so it covers any op, a third party's
included: well-formed commands with small sizes, values at and past every bound,
non-ASCII digits, unknown and malformed flags, stray quotes. :func:`check_command` is the
property every command must have: it parses into sound signatures (positive sizes,
bounded tensors, a round trip through ``to_command()``), or it is refused with a BOO
error whose message names the flag at fault. Anything else (a ``TypeError``,
``OverflowError``...) is a bug. A submodule, imported by name (``from boo_core.testing
import fuzz``), since hypothesis is a test dependency::

    @given(fuzz.commands(BooOpRegistry.get_op("softmax")))
    def test_softmax_commands(command):
        fuzz.check_command(command)

or, ready made, with a fixed seed (the same commands every run)::

    def test_softmax_commands():
        counts = fuzz.fuzz_commands("softmax", examples=300)
        assert counts["parsed"] and counts["refused"]
"""

from __future__ import annotations

import collections
import functools
import shlex
import time
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ..errors import BooError, CommandError, UnsupportedError
from ..plugins.registry import BooOpRegistry, OpEntry, OpRegistry
from ..signatures.dtypes import SUFFIX_TO_DTYPE
from ..signatures.flags import INT32_MAX, INT64_MAX, Flag, Indexed, Integer, OneOf, OptionalChoice, Switch
from ..signatures.signature import MAX_FUNC_NAME_LENGTH, MAX_TENSOR_BYTES

#: Outcomes :func:`check_command` reports.
PARSED, REFUSED = "parsed", "refused"

#: Integers at and past the bounds parsers and IREE care about.
BOUNDARY_INTEGERS = (0, -1, 1, 2, INT32_MAX, INT32_MAX + 1, 2**32, INT64_MAX, INT64_MAX + 1, 2**64, -(2**63) - 1,
                     10**308, 10**309)

#: Texts that are not plain numbers, whatever a careless parser thinks.
HOSTILE_TEXTS = (
    "", " ", "-", "--", "+", "1.5", "1e3", "1e400", "-0", "+7", "007", "0x10", "1_000", "1,2", "nan", "inf", "-inf",
    "١٢",  # Arabic-Indic digits
    "５",  # a fullwidth digit
    "²", "߂", "৩", "1\u00a0", "\u20073", "x", "NCHW", "nchw", "ncdhw", "NDHWC", "NCW", "nwc", "NW", "CHWN", "ß",
    "İ", "ﬀ", "é", "\x00", "\\", "'", '"', "$(x)", "2x3", "2x0x3", "0x0", "1" * 309, "9" * 5000,
)

#: Tokens that are not flags, or are malformed ones.
JUNK_TOKENS = ("-", "--", "---", "-=", "--=", "--=3", "-h", "--help", "-ü", "--ü", "-xy", "--in-layout", "x", "3",
               '"', "'", "\\", "\"open", "a'b", "-1", "--1", "%s", "{}", "\t")


# Each strategy is built once per argument and reused (functools caches): hypothesis validates
# a strategy object and computes its labels on first use, which cost more than the draws
# themselves when the composite built new ones for every draw. The draws are the same.


@functools.cache
def _integers(small: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, small), st.integers(-2, small), st.sampled_from(BOUNDARY_INTEGERS),
                     st.integers(-(2**70), 2**70))


@functools.cache
def _typed_values(flag: Flag, small: int) -> st.SearchStrategy[str]:
    """Well-formed texts for ``flag``'s value type (any type: the default's text at least)."""
    convert = flag.convert
    default = flag.format(flag.default) if flag.default is not None else ""
    options: list[st.SearchStrategy[str]] = [st.just(default)] if flag.default is not None else []
    if isinstance(convert, Integer):
        low = max(convert.minimum, -2)
        options.append(st.integers(low, max(low, small)).map(str))
    elif isinstance(convert, Switch):
        options.append(st.sampled_from(("0", "1")))
    elif isinstance(convert, Indexed):
        options.append(st.integers(0, len(convert.names) - 1).map(str))
    elif isinstance(convert, OneOf):
        options.append(st.sampled_from(convert.choices))
        options.append(st.sampled_from(convert.choices).map(str.lower))
    elif isinstance(convert, OptionalChoice):
        options.append(st.sampled_from(("", *convert.inner.choices)))
    elif default.lstrip("-").isdigit():
        options.append(st.integers(0, small).map(str))
    else:  # a number, text, or a type of the op's own (a tensor descriptor such as 2x3x4?)
        options.append(st.floats(-4, 4, allow_nan=False).map(repr))
        options.append(st.lists(st.integers(1, small), min_size=1, max_size=5).map(lambda d: "x".join(map(str, d))))
    return st.one_of(*options)


def values(flag: Flag, *, small: int = 8, hostile: bool = True) -> st.SearchStrategy[str]:
    """Value texts for one flag: well formed and small (``hostile=False``: only those), or
    an integer anywhere up to 2**70, or a text that is not a plain number at all."""
    return _typed_values(flag, small) if not hostile else _hostile_values(small)


@functools.cache
def _hostile_values(small: int) -> st.SearchStrategy[str]:
    return st.one_of(_integers(small).map(str), st.sampled_from(HOSTILE_TEXTS), st.text(max_size=6))


@functools.cache
def large_values(flag: Flag) -> st.SearchStrategy[str]:
    """Well-formed values at the top of an integer flag's range (two of them make a tensor
    too large to allocate, or to count in int64)."""
    convert = flag.convert
    top = convert.maximum if isinstance(convert, Integer) else INT32_MAX
    return st.sampled_from((top, top - 1, 2**16 + 1, 2**20, 46341)).map(str)


@functools.lru_cache(maxsize=4096)  # per value too: most values drawn recur (defaults, small sizes)
def _flag_token(flag: Flag, value: str) -> st.SearchStrategy[list[str]]:
    # lists, as before the cache (their labels steer hypothesis's choices); only ever read
    forms = [st.just([f"--{flag.long}", value]), st.just([f"--{flag.long}={value}"])]
    if flag.short is not None:
        forms += [st.just([f"-{flag.short}", value]), st.just([f"-{flag.short}={value}"])]
    return st.one_of(*forms)


@functools.cache
def _command_parts(keywords: tuple[str, ...], flags: tuple[Flag, ...], max_flags: int) -> tuple[st.SearchStrategy, ...]:
    """The strategies of :func:`commands` that depend only on the op: its base arguments, the
    number of flags, and which flag."""
    return (st.sampled_from(keywords), st.integers(0, max_flags), st.sampled_from(flags))


#: Dtype suffixes drawn for base arguments: the common ones more often.
_SUFFIXES = ("", "", "fp16", "bfp16", *sorted(SUFFIX_TO_DTYPE))
_SUFFIX = st.sampled_from(_SUFFIXES)
_ROLL = st.integers(0, 29)
_JUNK = st.sampled_from(JUNK_TOKENS) | st.text(max_size=4)
_UNQUOTED = st.integers(0, 19)


@st.composite
def commands(draw: st.DrawFn, entry: OpEntry, *, small: int = 8, hostile: bool = True, large: bool = True,
             max_flags: int = 10, as_text: bool | None = None) -> str | list[str]:
    """A command line for ``entry``'s op: a base argument (a keyword and a dtype suffix),
    then flags from its table with drawn values. With ``hostile``, about one flag in eight
    gets a large value (:func:`large_values`; with ``large=False``, a small one instead),
    one in six a hostile one (:func:`values`), and one token in thirty is junk. Returned as one
    string (quoted as a shell would need, or now and then not) or as a token list."""
    keywords, count, which_flag = _command_parts(tuple(entry.spec.keywords), tuple(entry.spec.parser.flags),
                                                 max_flags)
    base = draw(keywords) + draw(_SUFFIX)
    tokens: list[str] = []
    for _ in range(draw(count)):
        roll = draw(_ROLL) if hostile else 0  # hypothesis favours 0: keep it the plain case
        if roll == 29:
            tokens.append(draw(_JUNK))
            continue
        flag = draw(which_flag)
        if 20 <= roll < 24 and large:
            value = draw(large_values(flag))
        else:
            value = draw(values(flag, small=small, hostile=roll >= 24))
        tokens += draw(_flag_token(flag, value))
    if as_text is None:
        as_text = draw(st.booleans())
    if not as_text:
        return [base, *tokens]
    if hostile and draw(_UNQUOTED) == 19:
        return " ".join([base, *tokens])  # unquoted: spaces split values, quotes may stay open
    return shlex.join([base, *tokens])


def check_command(command: str | Sequence[str], registry: OpRegistry | None = None,
                  time_limit: float = 5.0) -> str:
    """Parse ``command`` and check the outcome; return :data:`PARSED` or :data:`REFUSED`.

    Refused: a :class:`~boo_core.errors.BooError` with a message, which contains the flag
    it names (``error.flag``). Parsed: every signature's tensors have positive sizes and at
    most :data:`~boo_core.signatures.signature.MAX_TENSOR_BYTES` bytes, its kernel name is
    bounded, its FLOP and byte counts are integers, and ``to_command()`` parses back to
    it. Any other exception propagates. Parsing must take under ``time_limit`` seconds.
    """
    registry = registry or BooOpRegistry.default()
    start = time.perf_counter()
    try:
        parsed = registry.parse(command)
    except BooError as e:
        message = str(e)
        assert message.strip(), f"{type(e).__name__} without a message for {command!r}"
        flag = getattr(e, "flag", None) if isinstance(e, (CommandError, UnsupportedError)) else None
        assert not flag or flag in message or repr(flag) in message, \
            f"the error names flag {flag!r} but its message does not: {message!r}"
        return REFUSED
    finally:
        elapsed = time.perf_counter() - start
        assert elapsed < time_limit, f"parsing took {elapsed:.1f} s: {command!r}"
    assert parsed.signatures, f"{command!r} parsed into no signature"
    for signature in parsed.signatures:
        _check_signature(signature, registry)
    return PARSED


def _check_signature(signature: Any, registry: OpRegistry) -> None:
    for spec in (*signature.input_specs(), *signature.output_specs()):
        assert spec.shape and all(isinstance(d, int) and d >= 1 for d in spec.shape) or spec.shape == (), \
            f"{signature.func_name}: tensor {spec.name} has shape {spec.shape}"
        assert spec.nbytes <= MAX_TENSOR_BYTES, f"{signature.func_name}: tensor {spec.name} has {spec.nbytes} bytes"
    assert 0 < len(signature.func_name) <= MAX_FUNC_NAME_LENGTH
    assert isinstance(signature.flops, int) and signature.flops >= 0
    assert isinstance(signature.bytes_moved, int) and signature.bytes_moved >= 0
    command = signature.to_command()
    again = registry.parse_command(command)
    assert again == signature, f"round trip changed {signature} -> {command!r} -> {again}"


def fuzz_commands(op: str | OpEntry, examples: int = 600, *, registry: OpRegistry | None = None,
                  seed: int = 0) -> collections.Counter:
    """:func:`check_command` on ``examples`` commands of ``op`` (its name or registry entry)
    drawn by :func:`commands` from ``seed`` (the same commands every run) without
    hypothesis's example database; how many were :data:`PARSED` and :data:`REFUSED`. A
    command that breaks the property fails with hypothesis's report of the smallest one."""
    registry = registry or BooOpRegistry.default()
    entry = registry.get_op(op) if isinstance(op, str) else op
    counts: collections.Counter = collections.Counter()

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(commands(entry))
    def check(command: str | list[str]) -> None:
        counts[check_command(command, registry)] += 1

    check()
    return counts
