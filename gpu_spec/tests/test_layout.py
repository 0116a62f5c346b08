"""MIG layout rules (every rule, the seed article's bad layouts, automatic placement, maximal
layouts) and mig-parted config files (NVIDIA's examples, spec errors, hostile YAML, writing)."""

from __future__ import annotations

import copy
import json
import time

import pytest

from gpu_spec.mig.catalogue import DATA_DIR, DEFAULT_PATH, load_catalogue, parse_catalogue
from gpu_spec.mig.config import (
    MAX_CONFIG_BYTES,
    ConfigError,
    MigConfigEntry,
    configs_valid_for,
    entry_for_layout,
    mig_devices_for,
    parse_mig_parted_config,
    read_mig_parted_config,
    render_mig_parted_config,
    validate_config,
)
from gpu_spec.mig.layout import (
    RULE_COMPUTE_SLICES,
    RULE_INVALID_START,
    RULE_MAX_COUNT,
    RULE_MEDIA_EXTENSIONS,
    RULE_MEMORY_SLICES,
    RULE_NO_ROOM,
    RULE_OVERLAP,
    RULE_UNKNOWN_PROFILE,
    RULES,
    InstanceRequest,
    Placement,
    enumerate_layouts,
    free_slices,
    validate_layout,
)

A100_80 = "NVIDIA A100-SXM4-80GB"
DEFAULT_FILE = DATA_DIR / "mig-parted-config-example.yaml"
CUSTOM_FILE = DATA_DIR / "mig-parted-config-example-custom.yaml"


def model(name: str = A100_80):
    return load_catalogue().model(name)


def check(*instances: str | tuple[str, int], gpu: str = A100_80):
    return validate_layout(
        model(gpu),
        [InstanceRequest(*i) if isinstance(i, tuple) else InstanceRequest(i) for i in instances],
    )


def by_rule(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for issue in result.issues:
        out.setdefault(issue.rule, []).append(issue)
    return out


# --- the seed article's layouts --------------------------------------------------------------


def test_three_4g_40gb_on_one_a100_is_refused_with_every_reason():
    result = check("4g.40gb", "4g.40gb", "4g.40gb")
    assert not result.ok and result.placements == []
    assert result.rules_broken == [
        RULE_MAX_COUNT,
        RULE_COMPUTE_SLICES,
        RULE_MEMORY_SLICES,
        RULE_NO_ROOM,
    ]
    assert (
        "4g.40gb can start only at slice 0 on NVIDIA A100-SXM4-80GB; a second one has nowhere "
        "to go (in the way: 4g.40gb at slices 0-3)" in result.errors
    )
    assert any("a third one has nowhere to go" in e for e in result.errors)
    assert (
        "NVIDIA A100-SXM4-80GB allows at most 1 x 4g.40gb per GPU; the layout asks for 3"
        in result.errors
    )
    assert (
        "the layout needs 12 compute slices (4g.40gb: 3 x 4); NVIDIA A100-SXM4-80GB has 7"
        in result.errors
    )
    assert [i.path for i in by_rule(result)[RULE_NO_ROOM]] == [
        "instances[1].start",
        "instances[2].start",
    ]


def test_2g_20gb_plus_7g_79gb_on_one_a100_is_refused_and_names_7g_80gb():
    result = check("2g.20gb", "7g.79gb")
    assert not result.ok
    issues = by_rule(result)
    unknown = issues[RULE_UNKNOWN_PROFILE][0]
    assert unknown.path == "instances[1].profile"
    assert unknown.message.startswith(
        "7g.79gb is not a MIG profile of NVIDIA A100-SXM4-80GB: its full-GPU "
        "(7-compute-slice) profile is 7g.80gb."
    )
    # Read as 7g.80gb, it still cannot share the GPU with anything.
    assert "9 compute slices" in issues[RULE_COMPUTE_SLICES][0].message
    assert "10 memory slices" in issues[RULE_MEMORY_SLICES][0].message
    (no_room,) = issues[RULE_NO_ROOM]
    assert no_room.instance == 1
    assert "7g.79gb (as 7g.80gb) can start only at slice 0" in no_room.message
    assert "takes all 8 memory slices" in no_room.message
    # With the right name it is refused all the same, for the real reasons.
    assert check("2g.20gb", "7g.80gb").rules_broken == [
        RULE_COMPUTE_SLICES,
        RULE_MEMORY_SLICES,
        RULE_NO_ROOM,
    ]


# --- each rule ------------------------------------------------------------------------------


def test_unknown_profile_names_what_the_model_offers_and_where_the_name_belongs():
    result = check("2g.20gb", gpu="NVIDIA A100-SXM4-40GB")
    (issue,) = result.issues
    assert issue.rule == RULE_UNKNOWN_PROFILE and issue.path == "instances[0].profile"
    assert "(it is one of NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3" in issue.message
    assert "NVIDIA A100-SXM4-40GB offers 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb" in issue.message
    # once per name, not once per instance
    assert len(check("9g.9gb", "9g.9gb", "9g.9gb").issues) == 1
    ci = check("1c.3g.40gb").issues[0]
    assert "compute instance inside a 3g.40gb GPU instance" in ci.message


def test_driver_rounding_variants_are_read_as_the_real_profile():
    result = check("3g.39gb", "3g.40gb")  # mig-parted issue #31
    assert result.rules_broken == [RULE_UNKNOWN_PROFILE]
    assert "is 3g.40gb" in result.errors[0]
    h100 = check("1g.11gb", gpu="NVIDIA H100 80GB HBM3")
    assert "its 1-compute-slice profile is 1g.10gb" in h100.errors[0]


def test_invalid_start():
    result = check(("3g.40gb", 2), ("1g.10gb", 7), ("2g.20gb", 9))
    assert [i.rule for i in result.issues] == [RULE_INVALID_START] * 3
    assert [i.path for i in result.issues] == [
        "instances[0].start",
        "instances[1].start",
        "instances[2].start",
    ]
    assert result.errors[0] == (
        "3g.40gb can start only at slice 0 or 4 on NVIDIA A100-SXM4-80GB, not at slice 2"
    )
    assert result.errors[1].startswith("1g.10gb can start only at slice 0, 1, 2, 3, 4, 5 or 6")
    assert "has memory slices 0-7" in result.errors[2]


def test_overlap_names_both_instances():
    result = check(("2g.20gb", 0), ("1g.10gb", 1), ("3g.40gb", 4), ("1g.10gb", 5))
    assert result.rules_broken == [RULE_OVERLAP]
    assert [i.path for i in result.issues] == ["instances[1].start", "instances[3].start"]
    assert result.errors[0] == (
        "1g.10gb at slice 1 overlaps 2g.20gb at slices 0-1 (instances[0]); two GPU instances "
        "cannot share a memory slice"
    )


def test_max_count():
    result = check(*["1g.20gb"] * 5)
    assert RULE_MAX_COUNT in result.rules_broken
    issue = by_rule(result)[RULE_MAX_COUNT][0]
    assert issue.path == "instances[4].profile"
    assert issue.message == (
        "NVIDIA A100-SXM4-80GB allows at most 4 x 1g.20gb per GPU; the layout asks for 5"
    )


def test_one_media_extension_instance_per_gpu():
    result = check("1g.6gb+me", "2g.12gb+me", gpu="NVIDIA A30")
    assert result.rules_broken == [RULE_MEDIA_EXTENSIONS]
    assert result.issues[0].path == "instances[1].profile"
    assert "asks for 2 (1g.6gb+me, 2g.12gb+me)" in result.errors[0]
    assert check("1g.6gb+me", "2g.12gb", "1g.6gb", gpu="NVIDIA A30").ok


def test_compute_and_memory_slice_totals_alone():
    """On real 7-slice tables the placements already keep compute within 7; a table where they
    do not shows the compute rule on its own."""
    data = json.loads(DEFAULT_PATH.read_text())
    a30 = copy.deepcopy(data["gpus"]["NVIDIA A30"])
    a30["total_compute_slices"] = 3
    a30["profiles"] = [p for p in a30["profiles"] if p["compute_slices"] <= 3]
    data["gpus"] = {"Test GPU": a30}
    test_gpu = parse_catalogue(data).model("Test GPU")
    result = validate_layout(test_gpu, [InstanceRequest("2g.12gb"), InstanceRequest("2g.12gb")])
    assert result.rules_broken == [RULE_COMPUTE_SLICES]
    assert result.errors == ["the layout needs 4 compute slices (2g.12gb: 2 x 2); Test GPU has 3"]
    memory = check("1g.10gb", "3g.40gb", "4g.40gb")
    assert "the layout needs 9 memory slices" in by_rule(memory)[RULE_MEMORY_SLICES][0].message


def test_no_room_says_what_is_in_the_way():
    result = check(("3g.40gb", 0), "4g.40gb")
    assert result.rules_broken == [RULE_NO_ROOM]
    assert result.errors == [
        "4g.40gb can start only at slice 0 on NVIDIA A100-SXM4-80GB; there is no room for it "
        "(in the way: 3g.40gb at slices 0-3)"
    ]
    eight = check(*["1g.10gb"] * 8)
    assert "an eighth one has nowhere to go (in the way: 7 x 1g.10gb" in eight.errors[-1]


def test_every_broken_rule_is_reported_at_once():
    result = check(
        "9g.9gb",
        ("3g.40gb", 2),
        ("2g.20gb", 0),
        ("1g.10gb", 1),
        "1g.10gb+me",
        "1g.10gb+me",
        "7g.80gb",
    )
    assert result.rules_broken == list(RULES)
    assert len(result.errors) == len(result.issues) >= len(RULES)


# --- automatic placement --------------------------------------------------------------------


def test_instances_without_a_start_get_the_placement_that_keeps_room():
    assert check("3g.40gb").placements == [Placement("3g.40gb", 4, 4)]  # 0-3 stay for a 4g
    assert check("1g.10gb").placements == [Placement("1g.10gb", 6, 1)]  # 0-3 and 4-5 stay whole
    result = check("3g.40gb", ("4g.40gb", 0))
    assert result.ok and result.placements == [
        Placement("3g.40gb", 4, 4),
        Placement("4g.40gb", 0, 4),
    ]
    balanced = check("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
    assert balanced.ok
    assert [p.start for p in balanced.placements] == [2, 3, 0, 4]
    assert balanced.placements == check("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb").placements


def test_placements_keep_request_order_and_sizes():
    result = check("1g.10gb", ("2g.20gb", 4), "1g.20gb")
    assert result.ok
    assert [p.profile for p in result.placements] == ["1g.10gb", "2g.20gb", "1g.20gb"]
    assert [p.size for p in result.placements] == [1, 2, 2]
    assert result.placements[1].start == 4
    assert free_slices(model(), result.placements) == tuple(
        s for s in range(8) if not any(s in p.slices for p in result.placements)
    )


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-80GB", "NVIDIA A30", "NVIDIA H200"])
def test_every_maximal_layout_is_valid_with_its_starts_and_found_without_them(gpu):
    layouts = enumerate_layouts(model(gpu))
    assert layouts
    for layout in layouts:
        with_starts = validate_layout(
            model(gpu), [InstanceRequest(p.profile, p.start) for p in layout]
        )
        assert with_starts.ok and with_starts.placements == list(layout)
        without = validate_layout(model(gpu), [InstanceRequest(p.profile) for p in layout])
        assert without.ok, (layout, without.errors)


def test_maximal_layouts_cannot_take_one_more_instance():
    m = model()
    layouts = enumerate_layouts(m)
    assert (Placement("7g.80gb", 0, 8),) in layouts
    assert (Placement("4g.40gb", 0, 4), Placement("3g.40gb", 4, 4)) in layouts
    assert (Placement("3g.40gb", 0, 4), Placement("3g.40gb", 4, 4)) in layouts
    assert tuple(Placement("1g.10gb", s, 1) for s in range(7)) in layouts
    assert len(set(layouts)) == len(layouts)
    extra = [(p.name, s) for p in m.profiles.values() for s in p.placements]
    for layout in layouts[::7]:
        for name, start in extra:
            grown = [InstanceRequest(p.profile, p.start) for p in layout]
            assert not validate_layout(m, [*grown, InstanceRequest(name, start)]).ok


def test_enumerate_layouts_is_cached_filtered_and_safe_to_mutate():
    m = model()
    started = time.perf_counter()
    first = enumerate_layouts(m)
    first.clear()
    again = enumerate_layouts(m)
    assert again and time.perf_counter() - started < 2
    big = enumerate_layouts(m, profiles=["3g.40gb", "4g.40gb", "7g.80gb"])
    assert set(big) == {
        (Placement("7g.80gb", 0, 8),),
        (Placement("4g.40gb", 0, 4), Placement("3g.40gb", 4, 4)),
        (Placement("3g.40gb", 0, 4), Placement("3g.40gb", 4, 4)),
    }
    a30 = enumerate_layouts(model("NVIDIA A30"), profiles=["2g.12gb", "4g.24gb"])
    assert set(a30) == {
        (Placement("4g.24gb", 0, 4),),
        (Placement("2g.12gb", 0, 2), Placement("2g.12gb", 2, 2)),
    }
    with pytest.raises(KeyError, match=r"no profile 1g\.5gb"):
        enumerate_layouts(m, profiles=["1g.5gb"])


def test_free_slices_and_placement_helpers():
    placement = Placement("3g.40gb", 4, 4)
    assert (placement.end, list(placement.slices), placement.mask) == (8, [4, 5, 6, 7], 0xF0)
    assert free_slices(model(), [placement, Placement("1g.10gb", 1, 1)]) == (0, 2, 3)
    assert free_slices(model("NVIDIA A30"), []) == (0, 1, 2, 3)


# --- mig-parted config files: NVIDIA's examples ----------------------------------------------


@pytest.fixture(scope="module")
def default_file():
    return read_mig_parted_config(DEFAULT_FILE)


def test_nvidia_files_parse(default_file):
    assert len(default_file.configs) == 81
    assert default_file.version == "v1"
    balanced = default_file.config("all-balanced")
    assert len(balanced) == 12
    assert balanced[10].device_filter == ("0x20B710DE",)  # a lone string filter
    assert dict(balanced[8].mig_devices) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    custom = read_mig_parted_config(CUSTOM_FILE)
    entries = custom.config("custom-config")
    assert [e.devices for e in entries] == [(0, 1, 2, 3), (4,), (5,), (6,), (7,)]
    assert [e.mig_enabled for e in entries] == [False, True, True, True, True]
    assert entries[0].mig_devices == {}
    assert default_file.config("all-enabled")[0].mig_devices == {}


def test_all_balanced_is_valid_on_every_model_in_the_catalogue(default_file):
    for gpu in load_catalogue().models():
        result = validate_config(default_file, "all-balanced", gpu)
        assert result.ok, (gpu.name, result.errors)
        (entry,) = result.entries
        assert entry.layout is not None and entry.layout.ok


def test_the_default_file_asks_for_each_profiles_max_count(default_file):
    """all-<profile> holds max_count of the profile: the catalogue and NVIDIA's file agree."""
    for gpu in load_catalogue().models():
        for profile in gpu.profiles.values():
            name = "all-" + profile.name.replace("+", ".")
            applying = [e for e in default_file.config(name) if e.applies_to(gpu)]
            if gpu.name == "NVIDIA H200 NVL" and profile.name == "1g.35gb":
                assert not applying  # NVIDIA's filter names only 0x2335 (noted in the table)
                continue
            assert [dict(e.mig_devices) for e in applying] == [{profile.name: profile.max_count}]
            assert validate_config(default_file, name, gpu).ok


def test_which_default_configs_fit_an_a100_80gb(default_file):
    assert configs_valid_for(default_file, model()) == [
        "all-disabled",
        "all-enabled",
        "all-1g.10gb",
        "all-1g.10gb.me",
        "all-1g.20gb",
        "all-2g.20gb",
        "all-3g.40gb",
        "all-4g.40gb",
        "all-7g.80gb",
        "all-balanced",
    ]
    custom = read_mig_parted_config(CUSTOM_FILE)
    assert configs_valid_for(custom, model("NVIDIA A100-SXM4-40GB")) == list(custom.configs)
    assert configs_valid_for(custom, model()) == ["all-disabled", "all-enabled", "all-1g.10gb"]


def test_a_config_for_another_gpu_names_the_entry_and_profile(default_file):
    result = validate_config(default_file, "all-1g.5gb", model())
    assert not result.ok
    assert result.errors == [
        'mig-configs["all-1g.5gb"][0].mig-devices["1g.5gb"]: 1g.5gb is not a MIG profile of '
        "NVIDIA A100-SXM4-80GB (it is one of NVIDIA A100-SXM4-40GB); NVIDIA A100-SXM4-80GB "
        "offers 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb."
    ]
    a30 = validate_config(default_file, "all-1g.10gb", model("NVIDIA A30"))
    assert not a30.ok and "no entry applies to NVIDIA A30 (0x20B710DE)" in a30.errors[0]
    with pytest.raises(KeyError, match="no config named nope"):
        validate_config(default_file, "nope", model())


def test_the_seed_layouts_in_a_config_file_are_refused_with_paths():
    text = """
version: v1
mig-configs:
  seed:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.20gb": 1
        "7g.79gb": 1
  three-4g:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"4g.40gb": 3}
"""
    parsed = parse_mig_parted_config(text)
    seed = validate_config(parsed, "seed", model())
    assert {p.path for p in seed.problems} == {
        'mig-configs["seed"][0].mig-devices',
        'mig-configs["seed"][0].mig-devices["7g.79gb"]',
    }
    assert any("its full-GPU (7-compute-slice) profile is 7g.80gb" in e for e in seed.errors)
    three = validate_config(parsed, "three-4g", model())
    assert any(
        p.path == 'mig-configs["three-4g"][0].mig-devices["4g.40gb"]'
        and "a second one has nowhere to go" in p.message
        for p in three.problems
    )


# --- mig-parted config files: what mig-parted refuses -------------------------------------


def problems_of(text: str | bytes) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_mig_parted_config(text)
    return [str(p) for p in caught.value.problems]


def test_spec_errors_are_all_reported_with_paths():
    text = """
version: v1
extra: 1
mig-configs:
  a:
    - devices: 7
      mig-enabled: yes
      mig-devices: {"1g.10gb": -1, "foo": 2, "2g.20gb": true}
      colour: red
  b: []
  c:
    - devices: all
      mig-enabled: false
      mig-devices: {"1g.10gb": 1}
  d:
    - devices: [0, 0, -1]
      mig-enabled: true
  e:
    - device-filter: ["0x2330", "bogus"]
      devices: all
      mig-enabled: "true"
      mig-devices: {}
  f:
    - device-filter: 0x20B210DE
      devices: all
      mig-enabled: false
"""
    assert problems_of(text) == [
        "extra: unexpected field; a mig-parted config has version and mig-configs",
        'mig-configs["a"][0].colour: unexpected field; an entry has device-filter, devices, '
        "mig-enabled, mig-devices",
        'mig-configs["a"][0].devices: a bare 7 is refused by mig-parted; write [7] '
        "(NVIDIA/mig-parted#44)",
        'mig-configs["a"][0].mig-devices["1g.10gb"]: the count must be a whole number 0-64, not -1',
        'mig-configs["a"][0].mig-devices["foo"]: \'foo\' is not a MIG profile name like 1g.10gb',
        'mig-configs["a"][0].mig-devices["2g.20gb"]: the count must be a whole number 0-64, '
        "not True",
        'mig-configs["b"]: must be a non-empty list of entries',
        'mig-configs["c"][0].mig-devices: must be empty when mig-enabled is false',
        'mig-configs["d"][0].devices[1]: GPU 0 is listed twice',
        'mig-configs["d"][0].devices[2]: -1 is not a GPU index (0, 1, ...)',
        'mig-configs["d"][0].mig-devices: missing; required when mig-enabled is true ({} for none)',
        "mig-configs[\"e\"][0].device-filter[0]: '0x2330' lacks the vendor half; write "
        "0x233010DE (device id << 16 | 0x10DE)",
        "mig-configs[\"e\"][0].device-filter[1]: 'bogus' is not a PCI id like 0x20B210DE",
        "mig-configs[\"e\"][0].mig-enabled: must be true or false, not 'true'",
        'mig-configs["f"][0].device-filter: YAML reads an unquoted 0x20b210de as a number; '
        'quote it: "0x20B210DE"',
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("mig-configs: {a: [{devices: all, mig-enabled: false}]}", "version: missing"),
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}", "'v2'"),
        ("version: v1", "mig-configs: missing"),
        ("version: v1\nmig-configs: {}", "mig-configs: must map"),
        ("", "a mig-parted config is a mapping"),
        ("- 1\n- 2", "a mig-parted config is a mapping"),
        ("version: v1\nmig-configs: {'bad name!': [{devices: all, mig-enabled: false}]}", "name"),
        ("version: [", "not valid YAML"),
    ],
)
def test_malformed_files(text, problem):
    assert any(problem in p for p in problems_of(text))


BILLION_LAUGHS = "version: v1\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (BILLION_LAUGHS, "expands to more than 50000 nodes"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper than 12 levels"),
        ("{a: " * 50_000, "nests deeper than 12 levels"),
        ("".join(" " * i + "a:\n" for i in range(500)), "nests deeper than 12 levels"),
        ("&a [*a]", "nests deeper than 12 levels"),
        ("# " + "x" * MAX_CONFIG_BYTES, f"at most {MAX_CONFIG_BYTES}"),
        (b"version: v1\n" + b"#" * MAX_CONFIG_BYTES, f"at most {MAX_CONFIG_BYTES}"),
        ("!!python/object/apply:os.system ['true']", "is not allowed"),
        ("version: !!binary djE=", "is not allowed"),
        ("version: v1\nversion: v2\nmig-configs: {}", "'version' appears twice"),
        (b"version: \xff\xfe", "not UTF-8"),
    ],
)
def test_hostile_yaml_is_refused_quickly(text, problem):
    started = time.perf_counter()
    found = problems_of(text)
    assert time.perf_counter() - started < 5
    assert any(problem in p for p in found), found


def test_the_node_count_stops_the_parser_early():
    """Counted while composing: the broken YAML after the limit is never parsed, and an alias
    counts the nodes it stands for (here 3 each: 40 aliases of a 2-item list)."""
    flood = "version: v1\nmig-configs: {a: [" + "1," * 500 + "]]] not YAML: [\n"
    with pytest.raises(ConfigError, match="more than 100 nodes"):
        parse_mig_parted_config(flood, max_nodes=100)
    aliases = "version: v1\nx: &a [1, 2]\n" + "".join(f"y{i}: *a\n" for i in range(40))
    with pytest.raises(ConfigError, match="expands to more than 100 nodes"):
        parse_mig_parted_config(aliases, max_nodes=100)
    assert problems_of(aliases) == ["x: unexpected field; a mig-parted config has version and "
                                    "mig-configs"] + [f"y{i}: unexpected field; a mig-parted "
                                    "config has version and mig-configs" for i in range(40)] + [
                                    "mig-configs: missing"]  # fmt: skip


def test_an_alias_counts_the_depth_of_what_it_names():
    deep = "version: v1\na: &a [[[[[[[1]]]]]]]\nb: [[[[[[*a]]]]]]\n"  # 8 + 1 + 6 levels
    assert any("nests deeper than 12 levels" in p for p in problems_of(deep))


# --- writing ---------------------------------------------------------------------------------


def test_layouts_render_to_a_file_mig_parted_reads_back():
    balanced = check("3g.40gb", "1g.10gb", "2g.20gb", "1g.10gb")
    assert mig_devices_for(balanced.placements) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    entries = {
        "portal-balanced": [entry_for_layout(balanced.placements)],
        "portal-per-gpu": [
            entry_for_layout([], devices=[0, 1], mig_enabled=False),
            entry_for_layout(
                check("7g.80gb").placements, devices=[2], device_filter=["0x20B210DE"]
            ),
        ],
    }
    text = render_mig_parted_config(entries)
    assert text.startswith("version: v1\nmig-configs:\n  portal-balanced:\n  - devices: all\n")
    parsed = parse_mig_parted_config(text)
    assert {name: list(es) for name, es in parsed.configs.items()} == entries
    assert configs_valid_for(parsed, model()) == ["portal-balanced", "portal-per-gpu"]
    assert validate_config(parsed, "portal-balanced", model()).entries[0].layout.placements == [
        Placement("1g.10gb", 2, 1),
        Placement("1g.10gb", 3, 1),
        Placement("2g.20gb", 0, 2),
        Placement("3g.40gb", 4, 4),
    ]


def test_nvidia_files_survive_a_round_trip(default_file):
    again = parse_mig_parted_config(render_mig_parted_config(default_file.configs))
    assert dict(again.configs) == dict(default_file.configs)
    # Entries compare by content, not by where in a file they were read.
    assert default_file.config("all-1g.5gb")[0] == MigConfigEntry(
        devices="all", mig_enabled=True, mig_devices={"1g.5gb": 7}
    )
