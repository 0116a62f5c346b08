"""GET /api/v1/mig/models/ and POST /api/v1/mig/validate/: any signed-in user; strict input;
a bad layout is a 400 naming every broken rule in the project's error shape."""

from __future__ import annotations

import pytest

from gpu_spec.mig.catalogue import DATA_DIR, load_catalogue

MODELS = "/api/v1/mig/models/"
VALIDATE = "/api/v1/mig/validate/"
A100_80 = "NVIDIA A100-SXM4-80GB"


def post(client, body: dict):
    return client.post(VALIDATE, body, format="json")


def test_anonymous_callers_are_refused(world, api_as):
    client = api_as(None)
    assert client.get(MODELS).status_code in (401, 403)
    body = {"gpu_model": A100_80, "instances": [{"profile": "7g.80gb"}]}
    assert post(client, body).status_code in (401, 403)


@pytest.mark.parametrize("persona", ["admin", "alice", "carol", "victor", "bob"])
def test_every_signed_in_user_reads_the_catalogue(
    world, api_as, persona, django_assert_max_num_queries
):
    with django_assert_max_num_queries(0):  # force_authenticate: the catalogue is a file
        response = api_as(getattr(world, persona)).get(MODELS)
    assert response.status_code == 200
    body = response.json()
    assert [m["name"] for m in body] == load_catalogue().model_names()
    a100 = next(m for m in body if m["name"] == A100_80)
    assert (a100["compute_slices"], a100["memory_slices"]) == (7, 8)
    assert a100["aliases"] == ["NVIDIA A100 80GB PCIe"]
    assert "0x20B210DE" in a100["pci_device_ids"]
    three_g = next(p for p in a100["profiles"] if p["name"] == "3g.40gb")
    assert three_g["placements"] == [0, 4]
    assert three_g["memory_slices"] == 4 and three_g["compute_slices"] == 3
    assert three_g["nvidia_smi_profile_id"] == 9
    assert three_g["nvml_profile_const"] == "NVML_GPU_INSTANCE_PROFILE_3_SLICE"
    assert three_g["nvml_profile_const_value"] == 2
    assert three_g["placements_confirmed"] is False and three_g["confirmed"] is False
    assert three_g["status"]["placements"].startswith("inferred")
    pcie = next(m for m in body if m["name"] == "NVIDIA H100 PCIe")
    assert pcie["derived_from"] == "NVIDIA H100 80GB HBM3" and pcie["total_sms"] is None


def test_a_valid_layout_answers_its_placements(world, api_as):
    body = {
        "gpu_model": A100_80,
        "instances": [{"profile": "3g.40gb"}, {"profile": "4g.40gb", "start": 0}],
    }
    response = post(api_as(world.carol), body)
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "valid": True,
        "gpu_model": A100_80,
        "placements": [
            {"profile": "3g.40gb", "start": 4, "size": 4},
            {"profile": "4g.40gb", "start": 0, "size": 4},
        ],
    }
    alias = post(api_as(world.bob), {"gpu_model": "NVIDIA A100 80GB PCIe", "instances": []})
    assert alias.status_code == 200
    assert alias.json() == {"valid": True, "gpu_model": A100_80, "placements": []}


def test_three_4g_40gb_is_a_400_naming_every_rule(world, api_as):
    body = {"gpu_model": A100_80, "instances": [{"profile": "4g.40gb"}] * 3}
    response = post(api_as(world.alice), body)
    assert response.status_code == 400
    error = response.json()
    assert set(error) == {"detail", "code", "fields", "extra"}
    assert error["code"] == "invalid"
    assert error["extra"]["rules"] == ["max-count", "compute-slices", "memory-slices", "no-room"]
    assert error["detail"].startswith("Not a valid MIG layout on NVIDIA A100-SXM4-80GB: ")
    fields = error["fields"]
    assert set(fields) == {
        "instances",
        "instances[1].profile",
        "instances[1].start",
        "instances[2].start",
    }
    assert fields["instances[1].start"] == [
        "4g.40gb can start only at slice 0 on NVIDIA A100-SXM4-80GB; a second one has nowhere "
        "to go (in the way: 4g.40gb at slices 0-3)"
    ]
    assert fields["instances[1].profile"] == [
        "NVIDIA A100-SXM4-80GB allows at most 1 x 4g.40gb per GPU; the layout asks for 3"
    ]
    assert len(fields["instances"]) == 2  # compute and memory slice totals


def test_2g_20gb_plus_7g_79gb_is_a_400_that_names_7g_80gb(world, api_as):
    body = {"gpu_model": A100_80, "instances": [{"profile": "2g.20gb"}, {"profile": "7g.79gb"}]}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert "its full-GPU (7-compute-slice) profile is 7g.80gb" in fields["instances[1].profile"][0]
    assert "7g.79gb (as 7g.80gb) can start only at slice 0" in fields["instances[1].start"][0]


def test_explicit_starts_are_checked(world, api_as):
    body = {
        "gpu_model": A100_80,
        "instances": [
            {"profile": "3g.40gb", "start": 2},
            {"profile": "2g.20gb", "start": 0},
            {"profile": "1g.10gb", "start": 1},
        ],
    }
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert fields["instances[0].start"] == [
        "3g.40gb can start only at slice 0 or 4 on NVIDIA A100-SXM4-80GB, not at slice 2"
    ]
    assert fields["instances[2].start"][0].startswith("1g.10gb at slice 1 overlaps 2g.20gb")
    assert response.json()["extra"]["rules"] == ["invalid-start", "overlap"]


def test_a_mig_parted_config_is_checked_per_entry(world, api_as):
    text = (DATA_DIR / "mig-parted-config-example.yaml").read_text()
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "all-balanced"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "valid": True,
        "gpu_model": A100_80,
        "config": "all-balanced",
        "entries": [
            {
                "path": 'mig-configs["all-balanced"][8]',
                "devices": "all",
                "device_filter": [
                    "0x233010DE",
                    "0x233110DE",
                    "0x232210DE",
                    "0x20B210DE",
                    "0x20B510DE",
                    "0x20F310DE",
                    "0x20F510DE",
                    "0x232410DE",
                ],
                "mig_enabled": True,
                "placements": [
                    {"profile": "1g.10gb", "start": 2, "size": 1},
                    {"profile": "1g.10gb", "start": 3, "size": 1},
                    {"profile": "2g.20gb", "start": 0, "size": 2},
                    {"profile": "3g.40gb", "start": 4, "size": 4},
                ],
            }
        ],
    }
    custom = (DATA_DIR / "mig-parted-config-example-custom.yaml").read_text()
    body = {
        "gpu_model": "NVIDIA A100-SXM4-40GB",
        "mig_parted_config": custom,
        "config": "custom-config",
    }
    response = post(api_as(world.carol), body)
    assert response.status_code == 200
    entries = response.json()["entries"]
    assert [e["devices"] for e in entries] == [[0, 1, 2, 3], [4], [5], [6], [7]]
    assert entries[0] == {
        "path": 'mig-configs["custom-config"][0]',
        "devices": [0, 1, 2, 3],
        "device_filter": [],
        "mig_enabled": False,
        "placements": [],
    }


def test_a_config_that_does_not_fit_names_the_yaml_path(world, api_as):
    text = 'version: v1\nmig-configs:\n  seed:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"2g.20gb": 1, "7g.79gb": 1}\n'
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "seed"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    error = response.json()
    fields = error["fields"]
    assert set(fields) == {
        'mig_parted_config.mig-configs["seed"][0].mig-devices',
        'mig_parted_config.mig-configs["seed"][0].mig-devices["7g.79gb"]',
    }
    assert "unknown-profile" in error["extra"]["rules"]
    other_gpu = post(
        api_as(world.carol),
        {
            "gpu_model": "NVIDIA A30",
            "mig_parted_config": (DATA_DIR / "mig-parted-config-example.yaml").read_text(),
            "config": "all-1g.10gb",
        },
    )
    assert other_gpu.status_code == 400
    assert (
        "no entry applies to NVIDIA A30"
        in (other_gpu.json()["fields"]['mig_parted_config.mig-configs["all-1g.10gb"]'][0])
    )


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "version: v1\na: &a [x,x,x,x,x,x,x,x,x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            ),
            "mig_parted_config",
            "expands to more than",
        ),
        ("[" * 5000 + "]" * 5000, "mig_parted_config", "nests deeper"),
        ("!!python/object/apply:os.system ['true']", "mig_parted_config", "not allowed"),
        (
            "version: v1\nmig-configs: {a: [{devices: 7, mig-enabled: true, mig-devices: {}}]}",
            'mig_parted_config.mig-configs["a"][0].devices',
            "a bare 7",
        ),
    ],
)
def test_a_hostile_or_broken_file_is_a_clean_400(world, api_as, text, field, words):
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "invalid"
    assert any(words in m for m in error["fields"][field]), error


def test_an_oversized_file_is_refused_before_parsing(world, api_as):
    body = {"gpu_model": A100_80, "mig_parted_config": "#" * (300 * 1024), "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["mig_parted_config"]


def test_a_pasted_file_over_64_kib_is_a_400_naming_the_limit(world, api_as):
    body = {"gpu_model": A100_80, "mig_parted_config": "#" * (64 * 1024 + 1), "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    (message,) = response.json()["fields"]["mig_parted_config"]
    assert "no more than 65536 characters" in message


def test_an_oversized_body_is_a_413_naming_the_limit_before_anything_reads_it(world, api_as):
    body = {"gpu_model": A100_80, "mig_parted_config": "#" * (600 * 1024), "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 413
    error = response.json()
    assert error["code"] == "payload_too_large"
    assert "larger than 524288 bytes (512 KiB)" in error["detail"]


def test_a_yaml_alias_bomb_within_the_size_limit_is_refused_by_its_node_count(world, api_as):
    """Each alias counts the nodes it stands for: 6,000 aliases of a two-node list."""
    text = "version: v1\nx: &a [1]\n" + "".join(f"y{i:04d}: *a\n" for i in range(6000))
    assert len(text) < 64 * 1024
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    (message,) = response.json()["fields"]["mig_parted_config"]
    assert "expands to more than 10000 nodes (aliases included)" in message


def test_a_file_of_too_many_nodes_is_refused_while_parsing(world, api_as):
    """The count stops the parser: the broken YAML after the 10,000th node is never read."""
    text = "version: v1\nmig-configs: {a: [" + "1," * 15_000 + "]]] not YAML: [\n"
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "a"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    (message,) = response.json()["fields"]["mig_parted_config"]
    assert "more than 10000 nodes" in message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpu_model": A100_80, "instances": [], "colour": "red"}, "colour"),
        (
            {"gpu_model": A100_80, "instances": [{"profile": "1g.10gb", "size": 1}]},
            "instances[0].size",
        ),
        (
            {"gpu_model": A100_80, "instances": [{"profile": "1g.10gb", "start": -1}]},
            "instances[0].start",
        ),
        ({"gpu_model": A100_80, "instances": [{"start": 0}]}, "instances[0].profile"),
        (
            {"gpu_model": A100_80, "instances": [{"profile": "1g.10gb", "start": "\u0663"}]},
            "instances[0].start",  # an Arabic-Indic 3: int() reads it as 3
        ),
        (
            {"gpu_model": A100_80, "instances": [{"profile": "1g.10gb"}] * 65},
            "instances.non_field_errors",  # how the project names a list's own error
        ),
        ({"gpu_model": A100_80}, "instances"),
        (
            {"gpu_model": A100_80, "instances": [], "mig_parted_config": "x", "config": "a"},
            "mig_parted_config",
        ),
        ({"gpu_model": A100_80, "mig_parted_config": "version: v1"}, "config"),
        ({"gpu_model": A100_80, "instances": [], "config": "a"}, "config"),
        ({"gpu_model": "H100-SXM5-80GB", "instances": []}, "gpu_model"),
        ({"instances": []}, "gpu_model"),
    ],
)
def test_input_is_strict(world, api_as, body, field):
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    error = response.json()
    assert set(error) >= {"detail", "code", "fields"}
    assert field in error["fields"], error


def test_an_unknown_config_name_lists_the_files_configs(world, api_as):
    text = (DATA_DIR / "mig-parted-config-example-custom.yaml").read_text()
    body = {"gpu_model": A100_80, "mig_parted_config": text, "config": "nope"}
    response = post(api_as(world.carol), body)
    assert response.status_code == 400
    assert "all-balanced, custom-config" in response.json()["fields"]["config"][0]


def test_form_encoded_bodies_are_refused(world, api_as):
    response = api_as(world.carol).post(VALIDATE, {"gpu_model": A100_80}, format="multipart")
    assert response.status_code == 415
