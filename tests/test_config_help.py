"Every field of every stage config says what it is, and `mascot <command> --help` shows it."

import contextlib, importlib, io
import pytest
from mascot.core.config import field_description
from mascot.apps.pipeline import STAGES
from mascot.apps import cli

CONFIGS = sorted(
    {s.config_class for s in STAGES}
    | {
        "mascot.domain.episodes:EpisodeConfig",
        "mascot.llm.routing:EndpointConfig",
        "mascot.judging.evaluator:JudgeConfig",
        "mascot.evaluation.auto_metrics:MetricsConfig",
    }
)


def config(path: str):
    mod, cls = path.split(":")
    return getattr(importlib.import_module(mod), cls)


@pytest.mark.parametrize("path", CONFIGS)
def test_every_field_is_described(path):
    cls = config(path)
    missing = [name for name in cls.model_fields if not (field_description(cls, name) or "").strip()]
    assert not missing, f"{cls.__name__}: fields without a description: {', '.join(missing)}"


COMMANDS = {
    "generate": "mascot.stage1.candidates:CandidatesConfig",
    "train-reward-model": "mascot.training.reward_models:RewardModelConfig",
    "train-speaker": "mascot.stage1.speaker_grpo:SpeakerGRPOConfig",
    "train-sft": "mascot.stage1.sft:SFTConfig_",
    "train-group": "mascot.stage2.director_grpo:DirectorGRPOConfig",
    "episode": "mascot.domain.episodes:EpisodeConfig",
    "eval": "mascot.evaluation.generate:EvalConfig",
    "judge": "mascot.judging.evaluator:JudgeConfig",
    "metrics": "mascot.evaluation.auto_metrics:MetricsConfig",
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_shows_every_description(command, capsys):
    cls = config(COMMANDS[command])
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    shown = "".join(
        capsys.readouterr().out.split()
    )  # argparse wraps lines (at spaces and hyphens): compare without whitespace
    for name in cls.model_fields:
        text = "".join(field_description(cls, name).split())
        assert f"--{name.replace('_', '-')}" in shown and text in shown, (
            f"mascot {command} --help: {name}: {text!r} not shown"
        )
