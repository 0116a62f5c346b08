"""The MIG catalogue: every model of the reference table loads, with its profiles, NVML ids,
placements and confirmed/inferred markings; lookups by NVML name, alias and PCI id; the package
imports without Django."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_spec.mig.catalogue import (
    DATA_DIR,
    DEFAULT_PATH,
    CatalogueError,
    GpuModel,
    load_catalogue,
    parse_catalogue,
)

REPO = Path(__file__).resolve().parents[1] / "src"
A100_40 = "NVIDIA A100-SXM4-40GB"
A100_80 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"

ALL_MODELS = [
    A100_40,
    A100_80,
    "NVIDIA A30",
    H100,
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    H200,
    "NVIDIA H200 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA GH200 144G HBM3e",
    "NVIDIA B200",
    "NVIDIA GB200",
    "NVIDIA H100 96GB HBM3",
    "NVIDIA H20",
    "NVIDIA PG506-96GB",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA B300",
    "NVIDIA GB300",
]
FOUR_SLICE_MODELS = {"NVIDIA A30", "NVIDIA RTX PRO 6000 Blackwell Server Edition"}


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def raw_table() -> dict:
    return json.loads(DEFAULT_PATH.read_text())


def placements(model: GpuModel) -> dict[str, tuple[int, ...]]:
    return {name: p.placements for name, p in model.profiles.items()}


# --- the data -------------------------------------------------------------------------------


def test_the_data_file_is_the_reference_copy_named_in_its_readme():
    digest = hashlib.sha256(DEFAULT_PATH.read_bytes()).hexdigest()
    assert digest in (DATA_DIR / "README.md").read_text()


def test_every_model_of_the_reference_loads(catalogue):
    assert catalogue.model_names() == ALL_MODELS
    assert set(catalogue.model_names()) == set(raw_table()["gpus"])
    for model in catalogue.models():
        assert model.profiles, model.name
        if model.name in FOUR_SLICE_MODELS:
            assert (model.compute_slices, model.memory_slices) == (4, 4)
        else:
            assert (model.compute_slices, model.memory_slices) == (7, 8), model.name
        full = model.full_profile()
        assert full is not None and full.placements == (0,)
        for profile in model.profiles.values():
            assert profile.compute_slices <= model.compute_slices
            for start in profile.placements:
                assert 0 <= start <= model.memory_slices - profile.memory_slices
            # max_count never exceeds what the placements can hold side by side
            disjoint = 0
            used: set[int] = set()
            for start in profile.placements:
                if used.isdisjoint(profile.slices(start)):
                    used.update(profile.slices(start))
                    disjoint += 1
            assert profile.max_count <= disjoint, (model.name, profile.name)


def test_a100_80gb_placements_match_the_notes_summary(catalogue):
    model = catalogue.model(A100_80)
    assert placements(model) == {
        "1g.10gb": (0, 1, 2, 3, 4, 5, 6),
        "1g.10gb+me": (0, 1, 2, 3, 4, 5, 6),
        "1g.20gb": (0, 2, 4, 6),
        "2g.20gb": (0, 2, 4),
        "3g.40gb": (0, 4),
        "4g.40gb": (0,),
        "7g.80gb": (0,),
    }
    sizes = {name: p.memory_slices for name, p in model.profiles.items()}
    assert sizes == {
        "1g.10gb": 1,
        "1g.10gb+me": 1,
        "1g.20gb": 2,
        "2g.20gb": 2,
        "3g.40gb": 4,  # 3 compute slices, 4 memory slices
        "4g.40gb": 4,
        "7g.80gb": 8,  # 7 compute slices, all 8 memory slices
    }
    assert model.profiles["3g.40gb"].compute_slices == 3
    assert [p.max_count for p in model.profiles.values()] == [7, 1, 4, 3, 2, 1, 1]


def test_the_two_profile_ids_are_kept_apart(catalogue):
    """nvidia_smi_profile_id (what create calls take) is not the NVML constant."""
    seven_slice = {
        "NVML_GPU_INSTANCE_PROFILE_1_SLICE": (0, 19),
        "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1": (7, 20),
        "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2": (9, 15),
        "NVML_GPU_INSTANCE_PROFILE_2_SLICE": (1, 14),
        "NVML_GPU_INSTANCE_PROFILE_3_SLICE": (2, 9),
        "NVML_GPU_INSTANCE_PROFILE_4_SLICE": (3, 5),
        "NVML_GPU_INSTANCE_PROFILE_7_SLICE": (4, 0),
    }
    for model in catalogue.models():
        if model.name in FOUR_SLICE_MODELS:
            continue
        for profile in model.profiles.values():
            assert seven_slice[profile.nvml_profile_const] == (
                profile.nvml_profile_const_value,
                profile.nvidia_smi_profile_id,
            ), (model.name, profile.name)
    a30 = catalogue.model("NVIDIA A30")
    assert {p.name: p.nvidia_smi_profile_id for p in a30.profiles.values()} == {
        "1g.6gb": 14,
        "1g.6gb+me": 21,
        "2g.12gb": 5,
        "2g.12gb+me": 6,
        "4g.24gb": 0,
    }
    assert a30.profiles["2g.12gb+me"].nvml_profile_const == "NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1"
    # the 4-slice RTX PRO 6000 numbers its plain and +me profiles as the A30 does
    rtx = catalogue.model("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    rtx_ids = {p.name: p.nvidia_smi_profile_id for p in rtx.profiles.values()}
    assert {n: rtx_ids[n] for n in ("1g.24gb", "1g.24gb+me", "2g.48gb", "4g.96gb")} == {
        "1g.24gb": 14,
        "1g.24gb+me": 21,
        "2g.48gb": 5,
        "4g.96gb": 0,
    }
    assert placements(a30) == {
        "1g.6gb": (0, 1, 2, 3),
        "1g.6gb+me": (0, 1, 2, 3),
        "2g.12gb": (0, 2),
        "2g.12gb+me": (0, 2),
        "4g.24gb": (0,),
    }


def test_h100_and_h200_profiles(catalogue):
    h100 = catalogue.model(H100)
    assert list(h100.profiles) == [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    assert placements(h100) == placements(catalogue.model(A100_80))
    assert h100.profiles["7g.80gb"].memory_mib == 81152
    assert h100.profiles["3g.40gb"].sm_count == 60
    assert h100.total_sms == 132
    assert h100.confirmed  # -lgipp read on an H100 80GB HBM3

    nvl = catalogue.model("NVIDIA H100 NVL")
    assert list(nvl.profiles)[-1] == "7g.94gb"
    assert placements(nvl) == {
        name.replace("10gb", "12gb")
        .replace("20gb", "24gb")
        .replace("40gb", "47gb")
        .replace("80gb", "94gb"): starts
        for name, starts in placements(h100).items()
    }

    h200 = catalogue.model(H200)
    assert list(h200.profiles) == [
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    ]
    assert h200.profiles["7g.141gb"].memory_mib == 143104  # 139.75 GiB (mig-parted #120)
    assert h200.profiles["3g.71gb"].placements == (0, 4)
    assert h200.profiles["4g.71gb"].max_count == 1


def test_confirmed_and_inferred_markings_stay_visible(catalogue):
    # A100-40GB: every placement read from the MIG guide's -lgipp.
    assert catalogue.model(A100_40).confirmed
    # A100-80GB: names confirmed, placements inferred from the 40GB die.
    a100_80 = catalogue.model(A100_80)
    three_g = a100_80.profiles["3g.40gb"]
    assert three_g.name_confirmed and three_g.profile_id_confirmed
    assert not three_g.placements_confirmed and not three_g.confirmed
    assert three_g.status["placements"].startswith("inferred")
    assert not a100_80.profiles["7g.80gb"].profile_id_confirmed
    # H200: placements inferred; 2g.35gb's id inferred too.
    h200 = catalogue.model(H200)
    assert not any(p.placements_confirmed for p in h200.profiles.values())
    assert not h200.profiles["2g.35gb"].profile_id_confirmed
    assert h200.profiles["3g.71gb"].profile_id_confirmed
    # "confirmed for 1g.24gb..7g ...; 1g ids inferred" counts as not confirmed (errs safe).
    gh200 = catalogue.model("NVIDIA GH200 480GB")
    assert "inferred" in gh200.profiles["1g.12gb"].status["nvidia_smi_profile_id"]
    assert not gh200.profiles["1g.12gb"].profile_id_confirmed
    # Sources and notes are kept.
    assert "MIG_UG_LGIPP_A100" in catalogue.model(A100_40).profiles["3g.20gb"].sources
    assert "3g.39gb" in three_g.notes


def test_same_as_entries_share_the_table_but_not_the_confidence(catalogue):
    pcie = catalogue.model("NVIDIA H100 PCIe")
    sxm = catalogue.model(H100)
    assert pcie.derived_from == H100
    assert placements(pcie) == placements(sxm)
    assert [p.nvidia_smi_profile_id for p in pcie.profiles.values()] == [
        p.nvidia_smi_profile_id for p in sxm.profiles.values()
    ]
    assert not any(p.placements_confirmed for p in pcie.profiles.values())
    assert all(p.sm_count is None for p in pcie.profiles.values())  # 114 SMs, not 132
    assert pcie.total_sms is None
    assert "114" in pcie.notes
    nvl = catalogue.model("NVIDIA H200 NVL")
    assert nvl.derived_from == H200 and list(nvl.profiles) == list(catalogue.model(H200).profiles)


# --- lookups --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (A100_80, A100_80),
        ("NVIDIA A100 80GB PCIe", A100_80),
        ("NVIDIA A100-PCIE-40GB", A100_40),
        ("A100-SXM4-40GB", A100_40),  # older drivers omit "NVIDIA "
        ("  nvidia   a100-sxm4-80gb ", A100_80),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),  # its own entry beats H100's alias
        ("NVIDIA H800", H100),
        ("NVIDIA H800 PCIe", H100),
        ("NVIDIA H800 NVL", "NVIDIA H100 NVL"),
        ("NVIDIA GH200 120GB", "NVIDIA GH200 480GB"),
        ("NVIDIA H200", H200),
    ],
)
def test_find_model_accepts_the_names_the_data_lists(catalogue, name, expected):
    assert catalogue.find_model(name).name == expected
    assert catalogue.model(name).name == expected
    assert name in catalogue


@pytest.mark.parametrize(
    "name",
    [
        "H100-SXM5-80GB",  # a marketing name, not an NVML one
        "NVIDIA H100",
        "H100 94GB SXM5 uses the same table",  # prose in the table's alias list
        "H100 96GB on GH200",
        "NVIDIA RTX PRO 6000 Blackwell",
        "",
    ],
)
def test_find_model_does_not_guess(catalogue, name):
    assert catalogue.find_model(name) is None
    assert name not in catalogue
    with pytest.raises(KeyError, match="not a GPU model in the MIG catalogue"):
        catalogue.model(name)


def test_aliases_are_names_not_remarks(catalogue):
    aliases = {m.name: m.aliases for m in catalogue.models()}
    assert aliases[A100_40] == ("NVIDIA A100-PCIE-40GB",)
    assert aliases[H100] == ("NVIDIA H800 PCIe", "NVIDIA H800")
    assert aliases["NVIDIA H100 NVL"] == ("NVIDIA H800 NVL",)
    assert aliases["NVIDIA GH200 480GB"] == ("NVIDIA GH200 120GB",)


def test_find_model_by_pci_device_id(catalogue):
    assert catalogue.find_model_by_pci_device_id("0x20B210DE").name == A100_80
    assert catalogue.find_model_by_pci_device_id("0x20b210de").name == A100_80
    assert catalogue.find_model_by_pci_device_id(0x20B210DE).name == A100_80
    assert catalogue.find_model_by_pci_device_id("0x2330").name == H100  # bare device id
    assert catalogue.find_model_by_pci_device_id("0x234210DE:0x180910DE").name == (
        "NVIDIA GH200 480GB"
    )
    # Listed by both; the entry that is only this id wins.
    assert catalogue.find_model_by_pci_device_id("0x233110DE").name == "NVIDIA H100 PCIe"
    assert catalogue.find_model_by_pci_device_id("0x2BB510DE").name == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    )
    assert catalogue.find_model_by_pci_device_id("0x2B8510DE") is None  # RTX 5090: no MIG
    assert catalogue.find_model_by_pci_device_id("bogus") is None


def test_the_catalogue_is_parsed_once_and_is_read_only(catalogue):
    assert load_catalogue() is catalogue
    model = catalogue.model(A100_80)
    with pytest.raises(TypeError):
        model.profiles["9g.1gb"] = model.profiles["1g.10gb"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        model.name = "x"  # type: ignore[misc]
    assert hash(model) == hash(catalogue.model(A100_80))


# --- broken tables are refused --------------------------------------------------------------


def _broken(change) -> dict:
    data = copy.deepcopy(raw_table())
    change(data)
    return data


def _a100_profile(data: dict, name: str) -> dict:
    return next(p for p in data["gpus"][A100_80]["profiles"] if p["name"] == name)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d.update(gpus={}), "non-empty"),
        (
            lambda d: _a100_profile(d, "3g.40gb")["placements"].append({"start": 4, "size": 4}),
            "listed twice",
        ),
        (
            lambda d: _a100_profile(d, "3g.40gb")["placements"].append({"start": 6, "size": 4}),
            "off the GPU",
        ),
        (
            lambda d: _a100_profile(d, "3g.40gb")["placements"].append({"start": 2, "size": 3}),
            "size 3",
        ),
        (lambda d: _a100_profile(d, "3g.40gb").update(nvml_profile_const_value=3), "nvml.h"),
        (lambda d: _a100_profile(d, "3g.40gb").update(nvidia_smi_profile_id=5), "profile id 5"),
        (lambda d: _a100_profile(d, "3g.40gb").update(name="3g.41gb"), "the name says"),
        (lambda d: _a100_profile(d, "3g.40gb").update(name="three"), "not a profile name"),
        (lambda d: _a100_profile(d, "3g.40gb").update(max_count=True), "boolean"),
        (lambda d: d["gpus"]["NVIDIA H200 NVL"].update(same_as="nope"), "not a full entry"),
    ],
)
def test_a_broken_table_is_refused_with_where(change, message):
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(_broken(change))


# --- no Django ------------------------------------------------------------------------------


def test_gpu_agent_mig_imports_only_the_standard_library_and_pyyaml():
    # PyYAML's compiled part brings Cython's runtime modules; nothing else may come.
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import gpu_spec.mig, gpu_spec.mig.catalogue, gpu_spec.mig.layout, "
        "gpu_spec.mig.config\n"
        "gpu_spec.mig.load_catalogue()\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "outside = sorted(m for m in new - set(sys.stdlib_module_names)"
        " - {'gpu_spec', 'yaml', '_yaml', 'cython_runtime'} if not m.startswith('_cython'))\n"
        "print(outside)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('django', 'rest_framework'))))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n" + script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outside, django_modules = done.stdout.splitlines()
    assert outside == "[]"
    assert django_modules == "[]"


# --- NVIDIA's default mig-parted config against the catalogue --------------------------------

# Profiles the default config offers to every GPU ("devices: all", no device filter) that no
# catalogue model has: names some GB200 boards report (3g.95gb, 4g.95gb, 7g.189gb, beside the
# 93gb/186gb names of others; gpu-operator PR 1303). Which NVML name they come with is not in
# NVIDIA's MIG guide, so the catalogue does not guess a model for them.
UNPLACED_DEFAULT_PROFILES = {"3g.95gb", "4g.95gb", "7g.189gb"}


def default_config():
    from gpu_spec.mig.config import read_mig_parted_config

    return read_mig_parted_config(DATA_DIR / "mig-parted-config-example.yaml")


def test_every_gpu_the_default_mig_parted_config_names_is_in_the_catalogue(catalogue):
    config = default_config()
    filtered = [
        (name, entry)
        for name in config.names()
        for entry in config.config(name)
        if entry.device_filter
    ]
    assert filtered  # the file does name GPUs by PCI id
    for name, entry in filtered:
        for pci in entry.device_filter:
            model = catalogue.find_model_by_pci_device_id(pci)
            assert model is not None, f"{name}: {pci} is not in the catalogue"
            assert entry.applies_to(model)
            missing = [p for p in entry.mig_devices if model.find_profile(p) is None]
            assert not missing, f"{name}: {model.name} ({pci}) has no {missing}"


def test_every_balanced_layout_of_the_default_config_is_valid_for_its_gpus(catalogue):
    from gpu_spec.mig.config import validate_config

    config = default_config()
    pcis = {p for e in config.config("all-balanced") for p in e.device_filter}
    models = {catalogue.find_model_by_pci_device_id(p) for p in pcis}
    assert None not in models
    for model in models:
        check = validate_config(config, "all-balanced", model)
        assert check.ok, (model.name, check.errors)


def test_every_unfiltered_profile_of_the_default_config_has_a_model(catalogue):
    config = default_config()
    offered = {
        profile
        for name in config.names()
        for entry in config.config(name)
        if not entry.device_filter
        for profile in entry.mig_devices
    }
    with_model = {p for p in offered if catalogue.models_with_profile(p)}
    assert offered - with_model == UNPLACED_DEFAULT_PROFILES


def test_the_new_models_keep_their_confirmed_and_inferred_marks(catalogue):
    rtx = catalogue.find_model_by_pci_device_id("0x2BB510DE")
    assert rtx is not None and rtx.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (rtx.compute_slices, rtx.memory_slices) == (4, 4)
    assert catalogue.find_model("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition") is rtx
    one = rtx.profiles["1g.24gb+me.all"]
    # name and id read from NVIDIA's guide and nvidia-smi; placements not read on hardware
    assert one.name_confirmed and one.profile_id_confirmed and not one.placements_confirmed
    assert (one.nvidia_smi_profile_id, one.max_count, one.media_extensions) == (65, 1, True)
    assert rtx.profiles["1g.24gb-me"].media_extensions is False
    b300 = catalogue.find_model_by_pci_device_id("0x318210DE")
    assert b300 is not None and b300.full_profile().name == "7g.269gb"
    assert not any(p.profile_id_confirmed for p in b300.profiles.values())
    gb300 = catalogue.find_model_by_pci_device_id("0x31C210DE")
    assert gb300 is not None and gb300.full_profile().name == "7g.278gb"
    for pci in ("0x233D10DE", "0x232910DE", "0x20B610DE"):
        model = catalogue.find_model_by_pci_device_id(pci)
        assert model is not None and model.derived_from == "NVIDIA GH200 480GB"
        assert "3g.48gb" in model.profiles and not model.confirmed
