"""Value objects, tiers and the error tree: what users compare, order and catch."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import sandboxio
from sandboxio import IsolationTier, NetworkPolicy, errors
from sandboxio import _native


def test_value_objects_are_frozen_and_compared_by_value():
    a = sandboxio.ExecResult(exit_code=0, stdout=b"x")
    assert a == sandboxio.ExecResult(exit_code=0, stdout=b"x")
    assert a != sandboxio.ExecResult(exit_code=1, stdout=b"x")
    for value in (a, sandboxio.OutputChunk("stdout", b"x"), sandboxio.RichOutput("text/html", b"<b>"),
                  NetworkPolicy(allow=("pypi.org",))):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, None)
        assert hash(value) == hash(dataclasses.replace(value))


def test_a_network_policy_denies_everything_unless_it_allows():
    assert NetworkPolicy() == NetworkPolicy.deny_all() and NetworkPolicy().denies_all
    pypi = NetworkPolicy.allowing("pypi.org", "*.pythonhosted.org")
    assert pypi == NetworkPolicy(allow=["pypi.org", "*.pythonhosted.org"])
    assert pypi.allow == ("pypi.org", "*.pythonhosted.org") and not pypi.denies_all
    assert NetworkPolicy(pinned={"b": "2", "a": "1"}) == NetworkPolicy(pinned=(("a", "1"), ("b", "2")))
    with pytest.raises(TypeError):
        NetworkPolicy(allow="pypi.org")  # one string is not a list of hosts


def test_isolation_tiers_are_ranked_and_unknown_satisfies_nothing():
    assert IsolationTier.CONTAINER < IsolationTier.GVISOR < IsolationTier.MICROVM
    assert IsolationTier.MICROVM.satisfies(IsolationTier.CONTAINER)
    assert not IsolationTier.CONTAINER.satisfies(IsolationTier.GVISOR)
    assert not IsolationTier.UNKNOWN.satisfies(IsolationTier.UNKNOWN)
    assert IsolationTier("gvisor") is IsolationTier.GVISOR and str(IsolationTier.GVISOR) == "gvisor"
    assert {t.rank for t in IsolationTier} == {0, 10, 20, 30}  # every member ranked


def test_every_catalog_code_has_its_class_and_every_class_its_code():
    catalog = {number: name for number, _id, name, *_ in _native.catalog()}
    for number, name in catalog.items():
        cls = type(errors.from_code(number))
        assert cls.__name__ == name, (number, name, cls)
        assert issubclass(cls, errors.SandboxioError)
    classes = {c.number for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.SandboxioError) and c.number}
    assert classes == set(catalog)


def test_errors_group_by_their_hundreds_and_never_derive_from_builtins():
    assert issubclass(errors.FileNotFound, errors.FilesystemError)
    assert issubclass(errors.ImageNotFound, errors.SandboxError)
    for timeout in (errors.CreateTimeout, errors.ExecutionTimeout, errors.OperationTimeout,
                    errors.AuditSinkTimeout):
        assert issubclass(timeout, errors.SandboxTimeout)
        assert not issubclass(timeout, (TimeoutError, OSError))
    assert errors.SandboxTimeout.__name__ != "TimeoutError"
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.SandboxioError):
            assert cls.__mro__[-3:] == (Exception, BaseException, object)  # no other builtin


def test_an_error_carries_its_code_hint_and_page_and_survives_pickling():
    e = errors.from_code(1001, "bad scheme in 'dockr://x'")
    assert isinstance(e, errors.InvalidDsn)
    assert (e.code, e.number, e.detail) == ("SBX_E1001", 1001, "bad scheme in 'dockr://x'")
    assert e.hint and e.url.endswith("SBX_E1001.md")
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is errors.InvalidDsn and again.detail == e.detail


def test_bad_dsns_and_options_are_coded_errors_with_hints():
    with pytest.raises(errors.InvalidDsn):
        sandboxio.create("not a dsn")
    with pytest.raises(errors.BackendNotFound) as caught:
        sandboxio.create("nosuch://x")
    assert caught.value.hint
    with pytest.raises(errors.InvalidCreateOptions) as caught:
        sandboxio.create("fake://", lifetme=5)
    assert "lifetme" in caught.value.detail and "lifetime" in caught.value.hint
    with pytest.raises(errors.InvalidCreateOptions):
        sandboxio.create("fake://", network=["pypi.org"])
    with pytest.raises(errors.InvalidCreateOptions):
        sandboxio.create("fake://", lifetime=-1)
    with pytest.raises(ValueError):
        sandboxio.create("fake://", require_isolation="bulletproof")


def test_a_required_isolation_the_backend_lacks_refuses_to_create():
    with pytest.raises(errors.IsolationNotSatisfied):
        sandboxio.create("fake://", require_isolation=IsolationTier.CONTAINER)
