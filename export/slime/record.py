"""slime: its pin, search rules and command-line names."""

from __future__ import annotations

from export._src.record import BF16_ROLLOUT
from export._src.record import DEGREES
from export._src.record import NO_VPP
from export._src.record import SearchRules
from export._src.record import tie

NAME = "slime"
FRAMEWORK = "slime"
PIN = "THUDM/slime@624b824"
FROM_HELP = ("slime run to start from: a file holding the train.py / train_async.py command "
             "line.")
# Megatron (ZeRO-1 distributed optimizer), SGLang engines without PP; every model gets
# the actor's Megatron flags and micro-batch.
SEARCH = SearchRules(
    families=("colocated", "split", "split_async"),
    rule_sets=("zero3", "batch", "slime"), nodes="uniform",
    options=(("zero_stages", (1,)), ("engine_max_pp", 1)) + NO_VPP + BF16_ROLLOUT,
    ties=(("actor.mb_infer", "actor.mb_train"),) + tie(("critic",), DEGREES)
    + (("critic.mb_train", "actor.mb_train"), ("critic.mb_infer", "actor.mb_train")),
    note="slime: Megatron flags shared by every model, SGLang without PP")
