"""verl's multi-turn rollouts of opgen's episodes: an agent loop (verl 0.9.1's ``AgentLoopBase``).

verl 0.9.1 runs multi-turn rollouts as agent loops (it has no interaction API any more). This one
plays :mod:`opgen.episode` on a row: generate, grade the answer as single-turn scoring does, and
when it is wrong append the feedback as the next user turn and generate again, up to ``max_turns``.
The rollout's reward is the episode's (``discount ** (t - 1) * score_t``), set as the loop's
``reward_score`` so verl's reward manager is not called again; ``extra_fields["turn_scores"]`` holds
each turn's score. Only the model's tokens are in the response mask (the feedback turns are context).

Use it with ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` naming a YAML file::

    - name: opgen_episode
      _target_: opgen.integrations.verl_agent.OpgenEpisodeAgentLoop

and ``actor_rollout_ref.rollout.agent.default_agent_loop=opgen_episode`` (or an ``agent_name``
column). A row's ``extra_info.episode`` (a mapping of :class:`opgen.episode.EpisodeSettings`'
fields) sets its episode; otherwise the defaults. This module imports verl: only verl loads it.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from opgen.episode import Episode, EpisodeSettings

__all__ = ["OpgenEpisodeAgentLoop"]


@register("opgen_episode")
class OpgenEpisodeAgentLoop(AgentLoopBase):
    """opgen's multi-turn episode as a verl agent loop (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        extra = dict(kwargs.get("extra_info") or {})
        settings = EpisodeSettings.of(extra.get("episode"), "extra_info.episode")
        row = {"prompt": messages, "reward_model": dict(kwargs["reward_model"]), "extra_info": extra}
        episode = Episode(row, settings)
        request_id = uuid4().hex
        ids = await self.ct_build_initial_tokens(messages)
        mask: list[int] = []
        logprobs: list[float] | None = None
        metrics: dict[str, Any] = {}
        turns = 0
        while True:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids,
                                                     sampling_params=sampling_params)
            turns += 1
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs if (logprobs or out.log_probs) else None,
                assistant_logprobs=out.log_probs or None)
            ids = merged.token_ids
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            step = await asyncio.to_thread(episode.step, text)
            if step["done"] or len(mask) >= self.response_length:
                break
            before = list(messages)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": step["feedback"]}]
            merged, mask, logprobs = await self.ct_merge_context_msg(before, messages, ids, mask, logprobs or None)
            ids = merged.token_ids
            if len(mask) >= self.response_length:
                break
        response = ids[len(ids) - len(mask):]
        prompt = ids[:len(ids) - len(mask)]
        output = AgentLoopOutput(
            prompt_ids=prompt, response_ids=response[:self.response_length], response_mask=mask[:self.response_length],
            response_logprobs=logprobs[:self.response_length] if logprobs else None,
            reward_score=episode.reward, num_turns=2 * turns, metrics=metrics)
        output.extra_fields.update({"turn_scores": list(episode.scores), "tool_rewards": []})
        return output
