"""The shipped SmolLM2-135M-Instruct GGUF: weights, logits and greedy text against transformers.

Default tests use transformers' own GGUF reader (`load_gguf_checkpoint`: its dequantisation
and q/k un-permutation) feeding transformers' `LlamaForCausalLM`; a slow test goes through
`AutoModelForCausalLM.from_pretrained(..., gguf_file=...)` and its GGUF tokenizer end to end,
another takes the joint decision on all 30 layers.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from omjax.models import inference, load, memory_estimate
from omjax.models.loader import gguf_snapshot, load_config, read_snapshot, resolve

jax.config.update("jax_default_matmul_precision", "highest")

CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def ours():
    return load("smollm2-135m", dtype=jnp.float32)


@pytest.fixture(scope="module")
def reference(ours):
    """transformers' dequantised GGUF tensors loaded into transformers' Llama model."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = resolve("smollm2-135m")
    # The skeleton only maps GGUF names to module names; its shapes come from our config, and
    # the test below checks that config against the one transformers parses from the file.
    hf, _ = read_snapshot(gguf_snapshot(path))
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in hf.items() if k != "model_type"}))
    parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton)
    tensors, meta = parsed["tensors"], parsed["config"]
    tm = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in meta.items() if k != "model_type"}))
    missing, unexpected = tm.load_state_dict(tensors, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    tm.tie_weights()
    return tm.eval(), tensors, meta


def test_config_and_every_tensor_match_transformers(ours, reference):
    _, tensors, meta = reference
    cfg = ours.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size) == (
        meta["num_hidden_layers"], meta["hidden_size"], meta["num_attention_heads"],
        meta["num_key_value_heads"], meta["vocab_size"])
    assert cfg.tie_embeddings and cfg.rope_theta == meta["rope_theta"]
    assert load_config("smollm2-135m") == cfg
    p = ours.params
    np.testing.assert_array_equal(np.asarray(p["embed"]), tensors["model.embed_tokens.weight"].numpy())
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
             "down": "mlp.down_proj"}
    assert p["layers"]["q"].shape[0] == cfg.num_layers
    for i in range(cfg.num_layers):
        for ours_name, hf_name in names.items():
            ref = tensors[f"model.layers.{i}.{hf_name}.weight"].numpy().T
            np.testing.assert_array_equal(np.asarray(p["layers"][ours_name][i]), ref, err_msg=f"{i}.{hf_name}")


def test_logits_and_greedy_tokens_match_transformers(ours, reference):
    tm, _, _ = reference
    tok = ours.tokenizer
    short = [{"role": "user", "content": "Hi!"}]
    prompts = [inference.encode(tok, tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False))
               for c in (CHAT, short)]
    tokens, mask = inference.left_pad(prompts)
    ours_logits = np.asarray(ours.logits(tokens, mask))
    with torch.no_grad():
        ref = tm(input_ids=torch.tensor(tokens, dtype=torch.long),
                 attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy()
    real = mask.astype(bool)
    assert np.abs(ours_logits[real] - ref[real]).max() < 1e-3

    n = 20
    got = inference.generate(ours.family, ours.params, ours.config, prompts[:1], max_new_tokens=n,
                             eos_ids=[tok.eos_token_id])[0]
    with torch.no_grad():
        want = tm.generate(torch.tensor([prompts[0]]), max_new_tokens=n, do_sample=False,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    want = want[0, len(prompts[0]):].tolist()
    assert got == want
    assert len(got) == n and tok.decode(got).strip()


# The full depth compiles three 30-layer programs (about 70 s with the machine to itself, 190 s
# in the parallel suite); the first two layers of the same weights, under the same tokenizer
# and chat template, exercise every token and mask the decision path builds.
@pytest.mark.parametrize("depth", [2, pytest.param(30, marks=pytest.mark.slow)])
def test_joint_state_and_letter_scoring_with_shared_prefix_is_one_distribution(ours, depth):
    """On the real weights and tokenizer: the state labels of Overcooked tokenise as branches,
    the joint (label, letter) distribution sums to one, and the prefix-cached decision path
    picks the same (label, letter) pairs as whole prompts under the same keys."""
    from omjax.config import PolicyConfig
    from omjax.options.menu import MenuItem
    from omjax.prompts import overcooked
    from omjax.train.policy import LetterPolicy
    from omjax.train.rollout import Decider, Request

    config = dataclasses.replace(ours.config, num_layers=depth)
    params = {**ours.params, "layers": jax.tree.map(lambda w: w[:depth], ours.params["layers"])}
    policy = LetterPolicy(ours.family, config, 1.0, 0.9, remat=False)
    decider = Decider(policy, ours.tokenizer, PolicyConfig(state_line="model"))
    system = "Pick one option. Reply with two lines: 'state: <label>' and 'choice: <letter>'."
    menus = [["eat apple", "clean dirt", "go to the river"], ["go to the grass", "eat apple"],
             ["clean dirt", "wait", "eat apple", "go to the river"]]
    branches = decider.branches(overcooked.STATES)
    assert all(k >= 1 for k in branches.label_len)
    reqs = []
    for j, labels in enumerate(menus):
        menu = [MenuItem(chr(65 + k), k, name, None, name) for k, name in enumerate(labels)]
        user = "Action menu:\n" + "\n".join(f"{it.letter}) {it.label}" for it in menu)
        reqs.append(Request(0, 0, menu, decider.prompt(system, user), 0, None, branches=branches))
    from omjax.config import LoRAConfig
    from omjax.models import lora

    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "v"))
    bank = lora.init_lora(jax.random.PRNGKey(0), ours.family.lora_shapes(config), lcfg, 1)
    prefix = decider.prefill(params, bank, system)
    key = jax.random.split(jax.random.PRNGKey(0), len(reqs))
    cached = decider.decide(params, bank, reqs, key, prefix)
    whole = decider.decide(params, bank, reqs, key)
    assert [(o.state, o.action) for o in cached] == [(o.state, o.action) for o in whole]
    np.testing.assert_allclose([o.logp for o in cached], [o.logp for o in whole], atol=1e-4)
    prompts = [decider.encode(r.prompt) for r in reqs]
    tokens, mask = inference.left_pad(prompts)
    inputs = jax.tree.map(jnp.asarray, decider.letter_inputs([r.menu for r in reqs], [branches] * 3, tokens, mask))
    joint = np.asarray(jax.jit(lambda i: policy.joint_logp(params, None, i))(inputs))
    for j, r in enumerate(reqs):
        np.testing.assert_allclose(np.exp(joint[j, :, :len(r.menu)]).sum(), 1.0, atol=1e-5)
        assert cached[j].reply.startswith(f"state: {branches.labels[cached[j].state]}\nchoice: ")


def test_memory_estimate_arithmetic(ours):
    cfg = ours.config
    est = memory_estimate(cfg, n_agents=2, lora_rank=16, batch=4, seq=512)
    assert est["base_params"] == sum(int(np.prod(x.shape)) for x in jax.tree.leaves(ours.params))
    # LoRA parameters: rank * (d_in + d_out) over all 7 projections of all layers.
    d, f, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_kv_heads * cfg.head_dim
    per_layer = 16 * ((d + d) * 2 + (d + kv) * 2 + (d + f) * 3)
    assert est["lora_params_per_agent"] == per_layer * cfg.num_layers
    assert est["lora"] == 2 * per_layer * cfg.num_layers * 16
    no_remat = memory_estimate(cfg, 2, 16, 4, 512, remat=False)
    assert no_remat["activations"] > est["activations"]
    assert est["total"] == sum(est[k] for k in ("base", "lora", "activations", "logits", "kv_cache"))
    with pytest.raises(ValueError, match="n_agents"):
        memory_estimate(cfg, 0, 16, 4, 512)


@pytest.mark.slow
def test_end_to_end_against_transformers_gguf_loader(ours):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve("smollm2-135m")
    tm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    ttok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    text = ours.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text == ttok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids = inference.encode(ours.tokenizer, text)
    assert ids == inference.encode(ttok, text)
    with torch.no_grad():
        ref = tm(torch.tensor([ids])).logits.numpy()
    assert np.abs(np.asarray(ours.logits(np.array([ids]))) - ref).max() < 1e-3


def test_long_menus_take_single_token_letters_in_letter_mode(ours):
    """SmolLM2 lacks single tokens for some two-letter letters (so a 60-entry menu lettered A ..
    BH would fail in letter mode); the decider relabels entries past Z with the tokenizer's next
    single-token letters, keeps A .. Z, and every label then has a token id to score."""
    from omjax.config import PolicyConfig
    from omjax.options.menu import MenuItem, letter
    from omjax.models.inference import letter_token_ids
    from omjax.train.rollout import single_token_letters
    from omjax.train.policy import LetterPolicy, SamplePolicy
    from omjax.train.rollout import Decider

    tok = ours.tokenizer
    single = lambda s: len(tok.encode(" " + s, add_special_tokens=False)) == 1  # noqa: E731
    plain = [letter(k) for k in range(60)]
    assert not all(single(s) for s in plain)  # the failure this guards against
    with pytest.raises(ValueError, match="one token"):
        letter_token_ids(tok, plain)
    alphabet = single_token_letters(tok, 60)
    assert alphabet[:26] == plain[:26] and len(set(alphabet)) == 60 and all(single(s) for s in alphabet)
    assert sorted(alphabet, key=lambda s: (len(s), s)) == alphabet  # spreadsheet order, gaps skipped

    menu = [MenuItem(letter(k), k, f"opt{k}", None, f"option {k}") for k in range(60)]
    letters = Decider(LetterPolicy(ours.family, ours.config, 2.0, 1.0), tok, PolicyConfig())
    shown = letters.labelled(menu)
    assert [it.letter for it in shown] == alphabet
    assert [(it.index, it.opt, it.label) for it in shown] == [(it.index, it.opt, it.label) for it in menu]
    assert len(set(letters.letter_ids([it.letter for it in shown]))) == 60
    assert letters.labelled(menu[:26]) == menu[:26]
    sampling = Decider(SamplePolicy(ours.family, ours.config, 2.0, 1.0, 8, [0], 0), tok, PolicyConfig())
    assert sampling.labelled(menu) == menu  # replies are parsed as text: any letter works


def test_letter_last_menu_lines_end_in_the_token_the_reply_writes(ours):
    """Departure 19's premise, on the shipped tokenizer: under `env.menu_format=letter_last` a
    menu line ends in the very token letter mode scores after `choice:` (` A`), where the paper's
    `A) label` starts the line with another one (`A`)."""
    from omjax.models.inference import letter_token_ids
    from omjax.options.menu import MenuItem, letter, render_menu

    tok = ours.tokenizer
    menu = [MenuItem(letter(k), k, f"opt{k}", None, label) for k, label in
            enumerate(["wait", "place held item in pot @ (4, 2)", "pick up dish from dispenser @ (5, 4)"])]
    scored = letter_token_ids(tok, [it.letter for it in menu])
    last = [tok.encode(line, add_special_tokens=False)[-1] for line in render_menu(menu, "letter_last").splitlines()]
    first = [tok.encode(line, add_special_tokens=False)[0] for line in render_menu(menu).splitlines()]
    assert last == scored
    assert not set(first) & set(scored)
