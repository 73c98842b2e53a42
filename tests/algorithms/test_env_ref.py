"""A researcher's own environment: `module:EnvId`, `module:Class`, registered ids, with kwargs; and
image observations as the env batch delivers them (uint8, channels first)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from surreal.runtime.envs import ref as env_ref
from surreal.runtime.envs.make import EnvBatch, image_layout, make_env, spaces_for
from surreal.runtime.envs.ref import EnvRef, resolve

ENVS = Path(__file__).resolve().parents[1] / "envs"  # the users' modules of the tests


@pytest.fixture(autouse=True)
def user_modules() -> Iterator[None]:
    env_ref.extend_import_path([str(ENVS)])
    yield


def test_a_module_that_registers_its_id_on_import() -> None:
    assert resolve("line_world:LineWorld-v0") == "LineWorld-v0"
    env = make_env(EnvRef("line_world:LineWorld-v0", {"size": 6}), seed=0)
    assert env.unwrapped.size == 6  # type: ignore[attr-defined]


def test_a_class_of_the_module_is_an_entry_point() -> None:
    resolved = resolve("pixel_target:PixelTarget")
    assert isinstance(resolved, gym.envs.registration.EnvSpec)
    env = make_env(EnvRef("pixel_target:PixelTarget", {"size": 20}), seed=0)
    assert env.observation_space.shape == (1, 20, 20)


def test_a_registered_id_and_atari_ids_resolve_without_a_module() -> None:
    assert resolve("CartPole-v1") == "CartPole-v1"
    assert resolve("ALE/Pong-v5") == "ALE/Pong-v5"
    assert resolve("ale_py:ALE/Pong-v5") == "ALE/Pong-v5"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Foo-v0", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
        ("line_world:NoSuch-v0", "module 'line_world' neither registers an environment 'NoSuch-v0'"),
        ("line_world:", "expected MODULE:ENV_ID or MODULE:CLASS"),
        ("CartPol-v1", "unknown environment 'CartPol-v1' (did you mean 'CartPole-v1'"),
    ],
)
def test_what_cannot_be_resolved_is_named(name: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        resolve(name)
    assert message in str(err.value)
    assert name.partition(":")[0] in str(err.value)


def test_a_module_that_raises_on_import_is_named_with_its_error(tmp_path: Path) -> None:
    (tmp_path / "broken_envs_mod.py").write_text("raise RuntimeError('no licence')\n")
    env_ref.extend_import_path([str(tmp_path)])
    with pytest.raises(ValueError) as err:
        resolve("broken_envs_mod:Env-v0")
    assert "RuntimeError: no licence" in str(err.value)


def test_kwargs_the_constructor_refuses_are_named() -> None:
    with pytest.raises(ValueError) as err:
        make_env(EnvRef("line_world:LineWorld-v0", {"sise": 3}), seed=0)
    text = str(err.value)
    assert "line_world:LineWorld-v0" in text and "sise" in text and "\n" not in text


def test_the_import_path_is_appended_so_a_folder_never_shadows_installed_packages(tmp_path: Path) -> None:
    (tmp_path / "numpy").mkdir()
    env_ref.extend_import_path([str(tmp_path)])
    assert sys.path.index(str(tmp_path)) > sys.path.index(str(Path(np.__file__).parents[1]))


@pytest.mark.parametrize(
    ("shape", "layout", "chw"),
    [((84, 84), "hw", (1, 84, 84)), ((210, 160, 3), "hwc", (3, 210, 160)), ((4, 84, 84), "chw", (4, 84, 84))],
)
def test_uint8_boxes_of_rank_2_and_3_are_images(shape: tuple[int, ...], layout: str, chw: tuple) -> None:
    assert image_layout(gym.spaces.Box(0, 255, shape, np.uint8)) == (layout, chw)
    assert image_layout(gym.spaces.Box(0, 1, shape, np.float32)) is None  # float: a vector for an MLP


def test_an_env_batch_of_images_is_uint8_channels_first() -> None:
    batch = EnvBatch(EnvRef("pixel_target:PixelTarget-v0", {"size": 16}), 3, seed=0)
    obs = batch.reset()
    assert obs.dtype == np.uint8 and obs.shape == (3, 1, 16, 16)
    res = batch.step(np.zeros(3, np.int64))
    assert res.obs.dtype == np.uint8 and res.obs.shape == (3, 1, 16, 16)
    assert spaces_for("pixel_target:PixelTarget-v0").pixels


def test_atari_ids_get_the_standard_preprocessing() -> None:
    batch = EnvBatch("ALE/Pong-v5", 1, seed=0, training=False)
    assert batch.spaces.image_shape == (4, 84, 84) and batch.spaces.discrete


def test_channels_last_images_are_transposed_by_the_batch() -> None:
    class HWC(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (12, 10, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
            obs = np.zeros((12, 10, 3), np.uint8)
            obs[..., 1] = 7  # channel 1 only
            return obs, {}

        def step(self, action):  # type: ignore[no-untyped-def]
            return self.reset()[0], 0.0, False, False, {}

    sys.modules[__name__].HWC = HWC  # type: ignore[attr-defined]
    obs = EnvBatch(f"{__name__}:HWC", 2, seed=0).reset()
    assert obs.shape == (2, 3, 12, 10) and (obs[:, 1] == 7).all() and (obs[:, [0, 2]] == 0).all()
