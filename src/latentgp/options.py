"""Grouped option objects: the base that a model's knob groups are built from.

A model with many knobs takes them in a few small frozen dataclasses (a posterior family,
an estimator, a basis, ...) instead of two dozen flat keywords.  Each group

* is immutable and keyword-only, checks its values in ``__post_init__`` (one clear
  ``ValueError``/``TypeError`` naming the group and the field) and has ``replace(**changes)``;
* may take a shorthand (for example ``posterior="mog2"``) through the classmethod
  ``parse``, which a subclass overrides;
* round-trips through ``to_config`` / ``from_config`` (plain JSON values), so model files
  hold the group as a dict.

:func:`resolve_group` merges a group argument with the flat keywords it replaces: a flat
keyword that was passed gets a ``DeprecationWarning`` naming the new spelling, and giving
both spellings of one field is an error.  Models call it once per group in ``__init__``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from typing import Any, ClassVar, TypeVar

G = TypeVar("G", bound="OptionGroup")

#: marks a flat keyword that the caller did not pass (distinct from None)
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET", "__bool__": lambda s: False})()


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptionGroup:
    """Base of a model's grouped options (frozen, keyword-only, validated)."""

    #: the constructor argument that takes this group (for messages), e.g. ``"posterior"``
    argument: ClassVar[str] = ""
    #: the deprecated flat keywords this group replaces: ``{keyword: field}``
    flat_keywords: ClassVar[dict[str, str]] = {}
    #: how users write the class (for messages), e.g. ``"lg.SAVIGP.Posterior"``; default
    #: the class name
    written_as: ClassVar[str] = ""
    #: the fields that a shorthand (a value ``parse`` reads other than an instance or a
    #: dict) sets; None: the fields where the parsed group differs from the default
    shorthand_fields: ClassVar[tuple[str, ...] | None] = None

    def __post_init__(self) -> None:  # subclasses check their fields here
        pass

    def replace(self: G, **changes: Any) -> G:
        """A copy with ``changes`` applied (and checked)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option {sorted(unknown)[0]!r}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def parse(cls: type[G], value: Any) -> G:
        """The group from a shorthand; the base accepts only an instance or a dict."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls.from_config(value)
        raise TypeError(
            f"{cls.argument or cls.__name__} must be a {cls.__name__}"
            f"{cls._shorthand_hint()}, got {value!r}"
        )

    @classmethod
    def _shorthand_hint(cls) -> str:
        return " or a dict of its fields"

    def to_config(self) -> dict[str, Any]:
        """Plain JSON values, for ``get_config`` and model files."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_config(cls: type[G], config: dict[str, Any]) -> G:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(config) - names
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no option {sorted(unknown)[0]!r}; "
                f"its options are {sorted(names)}"
            )
        return cls(**config)


def flat_keyword_table(groups: Any) -> dict[str, tuple[str, str]]:
    """``{keyword: (group argument, field)}`` from the ``flat_keywords`` of ``groups`` (an
    iterable of group classes): every deprecated flat keyword of a model."""
    return {kw: (cls.argument, field) for cls in groups for kw, field in cls.flat_keywords.items()}


def resolve_groups(
    groups: dict[str, type[OptionGroup]],
    flat_keywords: dict[str, tuple[str, str]],
    given: dict[str, Any],
    flat: dict[str, Any],
    *,
    model: str,
) -> dict[str, Any]:
    """:func:`resolve_group` for each of a model's groups ``{argument: group class}``.

    ``given``: what the caller passed for each group argument (missing: None);
    ``flat``: the deprecated flat keywords the caller passed; ``flat_keywords``: every
    deprecated keyword as ``{keyword: (group argument, field)}``.  Returns
    ``{argument: group}``."""
    out = {}
    for argument, cls in groups.items():
        fields = {
            keyword: (field, flat.get(keyword, UNSET))
            for keyword, (arg, field) in flat_keywords.items()
            if arg == argument
        }
        out[argument] = resolve_group(cls, given.get(argument), fields, model=model)
    return out


def resolve_group(
    group_cls: type[G],
    given: Any,
    flat: dict[str, tuple[str, Any]],
    *,
    model: str,
) -> G:
    """The group a model uses, from its group argument and the deprecated flat keywords.

    ``given``: what the caller passed as the group argument (an instance, a shorthand that
    ``group_cls.parse`` reads, a dict, or None for the default group).  ``flat``: for each
    old flat keyword the caller may have passed, ``{keyword: (field, value)}`` with
    ``value`` :data:`UNSET` when it was not passed.  Every passed flat keyword gives one
    ``DeprecationWarning`` that shows the grouped spelling; a field set both ways is a
    ``ValueError``.
    """
    group = group_cls() if given is None else group_cls.parse(given)
    passed = {kw: fv for kw, fv in flat.items() if fv[1] is not UNSET}
    if not passed:
        return group
    default = group_cls()
    explicit = set()
    if isinstance(given, dict):
        explicit = set(given)
    elif given is not None and not isinstance(given, group_cls) and (
        group_cls.shorthand_fields is not None
    ):
        explicit = set(group_cls.shorthand_fields)
    elif given is not None:
        explicit = {
            f.name
            for f in dataclasses.fields(group)
            if getattr(group, f.name) != getattr(default, f.name)
        }
    changes = {}
    for keyword, (field, value) in passed.items():
        if field in explicit:
            raise ValueError(
                f"{model}: {keyword}= and {group_cls.argument}=...({field}=...) both set "
                f"{field}; use only {group_cls.argument}="
            )
        changes[field] = value
    # the whole grouped spelling: the flat values, and what the group argument already set
    spelled = ", ".join(
        f"{f.name}={changes[f.name]!r}"
        if f.name in changes
        else f"{f.name}={getattr(group, f.name)!r}"
        for f in dataclasses.fields(group)
        if f.name in changes or getattr(group, f.name) != getattr(default, f.name)
    )
    warnings.warn(
        f"{model}: {', '.join(f'{k}=' for k in passed)} "
        f"{'is' if len(passed) == 1 else 'are'} deprecated; write "
        f"{group_cls.argument}={group_cls.written_as or group_cls.__name__}({spelled})",
        DeprecationWarning,
        stacklevel=caller_stacklevel(),
    )
    return group.replace(**changes)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function that calls this one
    which points at the first frame outside the latentgp package: the user's line, however
    many of the package's frames (a model's ``__init__``, a subclass's ``super().__init__``,
    the :func:`~latentgp.validation.keyword_only_after_first` wrapper) lie between."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR
    ):
        frame = frame.f_back
        level += 1
    return level
