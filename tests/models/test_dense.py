"""llama / qwen3 families against PyTorch `transformers` on tiny random checkpoints."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from omjax.config import LORA_TARGETS, LoRAConfig
from omjax.models import base, family, inference, load, lora
from omjax.models.loader import read_snapshot

jax.config.update("jax_default_matmul_precision", "highest")

V, T, B = 101, 13, 3


def _tiny(kind: str):
    import transformers as tf

    common = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6)
    if kind == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common, tie_word_embeddings=True))
    if kind == "llama-untied-bias":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common, tie_word_embeddings=False,
                                                  attention_bias=True, mlp_bias=True,
                                                  rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                                "low_freq_factor": 1.0,
                                                                "high_freq_factor": 4.0,
                                                                "original_max_position_embeddings": 32}))
    if kind == "qwen3":
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=24, tie_word_embeddings=False))
    raise ValueError(kind)


def _build(kind, tmp_path_factory):
    torch.manual_seed(0)
    model = _tiny(kind).eval()
    # Perturb the norms so a wrong norm wiring cannot hide behind all-ones weights.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.1 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(kind)
    # A tiny shard limit forces a sharded checkpoint with model.safetensors.index.json.
    model.save_pretrained(path, max_shard_size="50KB")
    return model, path


@pytest.fixture(scope="module", params=["llama", "llama-untied-bias", "qwen3"])
def tiny(request, tmp_path_factory):
    """Every dense variant: used by the parity tests."""
    return _build(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """One variant for the machinery tests (LoRA bank, gradients, cache): the code path is
    shared by all dense variants, and each extra variant costs a round of compiles."""
    return _build("qwen3", tmp_path_factory)


def _batch(seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, V, (B, T)).astype(np.int32)
    mask = np.ones((B, T), np.int32)
    mask[1, :5] = 0   # left padding
    mask[2, :1] = 0
    return tokens, mask


def _torch_logits(model, tokens, mask):
    with torch.no_grad():
        return model(input_ids=torch.tensor(tokens, dtype=torch.long),
                     attention_mask=torch.tensor(mask, dtype=torch.long)).logits.float().numpy()


def test_logits_match_pytorch(tiny):
    model, path = tiny
    assert (path / "model.safetensors.index.json").exists()
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    tokens, mask = _batch()
    ours = np.asarray(m.logits(tokens, mask))
    ref = _torch_logits(model, tokens, mask)
    assert ours.shape == (B, T, V)
    real = mask.astype(bool)
    np.testing.assert_allclose(ours[real], ref[real], atol=1e-4, rtol=0)


def test_fused_attention_matches_pytorch_with_padding_and_a_cached_prefix(tiny_qwen3, monkeypatch):
    """The accelerators' attention (`jax.nn.dot_product_attention`, XLA here) in the whole model:
    left-padded logits and a suffix through a cached prefix against transformers."""
    monkeypatch.setattr(base, "ATTENTION", "fused")
    model, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    tokens, mask = _batch(seed=5)
    ours, _ = m.family.forward(m.params, m.config, jnp.asarray(tokens), attention_mask=jnp.asarray(mask))
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours)[real], _torch_logits(model, tokens, mask)[real], atol=1e-4, rtol=0)
    prefix, suffix = tokens[0, :6].tolist(), tokens[:, 6:]
    pt, pm = inference.prefix_arrays(prefix)
    pc = inference.prefill(m.family, m.params, m.config, jnp.asarray(pt), jnp.asarray(pm))
    cached, _ = m.family.forward(m.params, m.config, jnp.asarray(suffix), cache=inference.extend_for(pc, B, T - 6))
    full = np.concatenate([np.repeat(tokens[:1, :6], B, 0), suffix], axis=1)
    ref = _torch_logits(model, full, np.ones_like(full))[:, 6:]
    np.testing.assert_allclose(np.asarray(cached), ref, atol=1e-4, rtol=0)


def _random_lora(m, cfg, seed=1, rank=4):
    bank = lora.init_lora(jax.random.PRNGKey(seed), m.family.lora_shapes(m.config), cfg, 1)
    # Nonzero B so the adapter actually changes the outputs.
    leaves, tree = jax.tree.flatten(bank)
    keys = jax.random.split(jax.random.PRNGKey(seed + 100), len(leaves))
    leaves = [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    return lora.agent(jax.tree.unflatten(tree, leaves), 0)


def test_lora_matches_peft(tiny):
    import peft

    model, path = tiny
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    cfg = LoRAConfig(rank=4, alpha=8.0, targets=LORA_TARGETS)
    adapter = _random_lora(m, cfg)
    hf_names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
                "gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    pcfg = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0,
                           target_modules=list(hf_names.values()))
    tokens, mask = _batch(1)
    base_ref = _torch_logits(model, tokens, mask)
    pm = peft.get_peft_model(model, pcfg).eval()
    with torch.no_grad():
        for i, layer in enumerate(lora.to_layers(adapter, m.family.lora_shapes(m.config))):
            for target, ab in layer.items():
                parent = "self_attn" if target in ("q", "k", "v", "o") else "mlp"
                mod = pm.base_model.model.model.layers[i].get_submodule(f"{parent}.{hf_names[target]}")
                mod.lora_A["default"].weight.copy_(torch.tensor(np.asarray(ab["a"]).T))
                mod.lora_B["default"].weight.copy_(torch.tensor(np.asarray(ab["b"]).T))
    ref = _torch_logits(pm, tokens, mask)
    pm.unload()  # give the module-scoped fixture its plain model back
    ours = np.asarray(m.logits(tokens, mask, lora=adapter, lora_scale=cfg.scale))
    real = mask.astype(bool)
    assert np.abs(ref - base_ref)[real].max() > 1e-2, "the adapter must change the logits"
    np.testing.assert_allclose(ours[real], ref[real], atol=1e-4, rtol=0)


def test_zero_b_lora_equals_base_and_bank_equals_separate_calls(tiny_qwen3):
    _, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    cfg = LoRAConfig(rank=4, alpha=8.0, targets=("q", "v", "down"))
    n_agents = 3
    fresh = lora.init_lora(jax.random.PRNGKey(0), m.family.lora_shapes(m.config), cfg, n_agents)
    tokens, mask = _batch(2)
    base_logits = np.asarray(m.logits(tokens, mask))
    zero = np.asarray(m.logits(tokens, mask, lora=lora.agent(fresh, 1), lora_scale=cfg.scale))
    np.testing.assert_array_equal(zero, base_logits)

    bank = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(x.size), x.shape), fresh)
    fwd = lambda ad: m.family.forward(m.params, m.config, jnp.asarray(tokens),
                                      attention_mask=jnp.asarray(mask), lora=ad,
                                      lora_scale=cfg.scale)[0]
    together = np.asarray(jax.jit(jax.vmap(fwd))(bank))                  # [A, B, T, V]
    assert together.shape == (n_agents, B, T, V)
    for a in range(n_agents):
        alone = np.asarray(m.logits(tokens, mask, lora=lora.agent(bank, a), lora_scale=cfg.scale))
        np.testing.assert_allclose(together[a], alone, atol=1e-5, rtol=0)
    assert np.abs(together[0] - together[1]).max() > 1e-3


def test_lora_gradient_flows_and_remat_agrees(tiny_qwen3):
    _, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    cfg = LoRAConfig(rank=2, alpha=2.0, targets=LORA_TARGETS)
    adapter = lora.agent(lora.init_lora(jax.random.PRNGKey(3), m.family.lora_shapes(m.config), cfg), 0)
    tokens, mask = _batch(3)
    letters = jnp.asarray([5, 7, 11], jnp.int32)
    chosen = jnp.asarray([0, 2, 1])

    def loss(ad, remat):
        logits, _ = m.family.forward(m.params, m.config, jnp.asarray(tokens), attention_mask=jnp.asarray(mask),
                                     lora=ad, lora_scale=cfg.scale, last_only=True, remat=remat)
        lp = jax.nn.log_softmax(logits[:, -1, letters], axis=-1)
        return -jnp.mean(lp[jnp.arange(B), chosen])

    g = jax.jit(jax.grad(loss), static_argnums=1)(adapter, False)
    g_remat = jax.jit(jax.grad(loss), static_argnums=1)(adapter, True)
    # With B = 0 only B receives gradient; it must be nonzero and finite.
    b_norm = sum(float(jnp.abs(l["b"]).sum()) for group in g["layers"].values() for l in group.values())
    a_norm = sum(float(jnp.abs(l["a"]).sum()) for group in g["layers"].values() for l in group.values())
    assert np.isfinite(b_norm) and b_norm > 0 and a_norm == 0
    for x, y in zip(jax.tree.leaves(g), jax.tree.leaves(g_remat)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)
    # `remat=1` (the memory plan's partial remat, `train.remat=auto`): the bottom layer alone is
    # recomputed, in a scan of its own, with the same gradients.
    g_part = jax.jit(jax.grad(loss), static_argnums=1)(adapter, 1)
    for x, y in zip(jax.tree.leaves(g), jax.tree.leaves(g_part)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)
    jaxpr = lambda remat: str(jax.make_jaxpr(loss, static_argnums=1)(adapter, remat))
    remats = lambda remat: len(re.findall(r"\b(?:remat2?|checkpoint)\[", jaxpr(remat)))  # the primitive's names
    assert remats(1) == remats(True) == 1 and remats(False) == 0
    assert jaxpr(1).count("scan[") > jaxpr(True).count("scan[")


def test_cached_prefix_and_greedy_generation_match_pytorch(tiny_qwen3):
    model, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    rng = np.random.RandomState(4)
    prefix = rng.randint(0, V, 6).tolist()
    prompts = [prefix + rng.randint(0, V, n).tolist() for n in (3, 7)]
    fam, cfg = m.family, m.config

    # Prefix prefilled once, suffix chunk through the cache == full forward, last position.
    pt, pm = inference.prefix_arrays(prefix)
    pc = inference.prefill(fam, m.params, cfg, jnp.asarray(pt), jnp.asarray(pm))
    suffix_tokens, suffix_mask = inference.left_pad([p[len(prefix):] for p in prompts])
    cache = inference.extend_for(pc, 2, suffix_tokens.shape[1])
    cached, _ = fam.forward(m.params, cfg, jnp.asarray(suffix_tokens),
                            attention_mask=jnp.asarray(suffix_mask), cache=cache, last_only=True)
    full_tokens, full_mask = inference.left_pad(prompts)
    full = np.asarray(m.logits(full_tokens, full_mask))[:, -1]
    np.testing.assert_allclose(np.asarray(cached)[:, -1], full, atol=1e-4, rtol=0)

    n_new = 9
    ours = inference.generate(fam, m.params, cfg, prompts, max_new_tokens=n_new, eos_ids=[V + 1],
                              prefix=prefix)
    for prompt, got in zip(prompts, ours):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=n_new, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert got == ref


def test_long_chunks_after_a_cached_prefix_match_pytorch_at_every_position(tiny_qwen3):
    """Suffixes longer than several attention query blocks (`base.QUERY_BLOCK`), left-padded
    to each other, through a cache: every real position's logits equal transformers'."""
    model, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    rng = np.random.RandomState(5)
    prefix = rng.randint(0, V, 20).tolist()
    lengths = (2 * base.QUERY_BLOCK + 22, base.QUERY_BLOCK + 3)
    prompts = [prefix + rng.randint(0, V, n).tolist() for n in lengths]
    pt, pm = inference.prefix_arrays(prefix)
    pc = inference.prefill(m.family, m.params, m.config, jnp.asarray(pt), jnp.asarray(pm))
    suffix_tokens, suffix_mask = inference.left_pad([p[len(prefix):] for p in prompts])
    cache = inference.extend_for(pc, 2, suffix_tokens.shape[1])
    ours, _ = m.family.forward(m.params, m.config, jnp.asarray(suffix_tokens),
                               attention_mask=jnp.asarray(suffix_mask), cache=cache)
    for i, prompt in enumerate(prompts):
        ref = _torch_logits(model, np.asarray([prompt]), np.ones((1, len(prompt)), np.int32))[0, len(prefix):]
        np.testing.assert_allclose(np.asarray(ours)[i, -lengths[i]:], ref, atol=1e-4, rtol=0)


def test_top_p_sampling_keeps_only_the_nucleus():
    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]] * 512))
    keys = jax.random.split(jax.random.PRNGKey(0), 1)
    draws, logp = inference.sample_logits(keys[0], logits, jnp.float32(1.0), jnp.float32(0.7))
    assert set(np.asarray(draws).tolist()) == {0, 1}
    # Log-probs are those of the renormalised nucleus {0.5, 0.3}.
    np.testing.assert_allclose(np.asarray(logp), np.log(np.where(np.asarray(draws) == 0, 0.625, 0.375)), atol=1e-5)
    greedy, _ = inference.sample_logits(keys[0], logits, jnp.float32(0.0), jnp.float32(1.0))
    assert (np.asarray(greedy) == 0).all()


def test_clear_errors(tiny_qwen3, tmp_path):
    _, path = tiny_qwen3
    hf, get = read_snapshot(path)
    with pytest.raises(KeyError, match="model.layers.0.self_attn.q_proj.weight"):
        family(hf["model_type"]).params_from_hf(
            family(hf["model_type"]).config_from_hf(hf),
            lambda n: (_ for _ in ()).throw(KeyError(f"tensor {n!r} not found")) if "q_proj" in n else get(n),
            jnp.float32)
    bad = dict(hf, intermediate_size=hf["intermediate_size"] + 1)
    fam = family(hf["model_type"])
    with pytest.raises(ValueError, match="mlp.gate_proj.weight"):
        fam.params_from_hf(fam.config_from_hf(bad), get, jnp.float32)
    with pytest.raises(ValueError, match="unsupported model_type 'mamba'"):
        family("mamba")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load(tmp_path, with_tokenizer=False)
    with pytest.raises(FileNotFoundError, match="no model at"):
        load(tmp_path / "nowhere")


def test_lora_save_restore_roundtrip(tmp_path):
    cfg = LoRAConfig(rank=3, alpha=6.0, targets=("q", "up"))
    shapes = [{"q": (8, 8), "up": (8, 12), "down": (12, 8)}] * 2
    bank = lora.init_lora(jax.random.PRNGKey(0), shapes, cfg, n_agents=2)
    bank = jax.tree.map(lambda x: x + 1.0, bank)
    lora.save(tmp_path / "ck", bank, cfg)
    back, cfg2 = lora.restore(tmp_path / "ck")
    assert cfg2 == cfg
    assert jax.tree.structure(back) == jax.tree.structure(bank)
    for x, y in zip(jax.tree.leaves(bank), jax.tree.leaves(back)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    (group,) = bank["layers"]                                  # both layers have the same shapes
    assert group == "q8x8_up8x12"
    assert bank["layers"][group]["q"]["a"].shape == (2, 2, 8, 3)    # [agents, layers, d_in, r]
    assert bank["layers"][group]["up"]["b"].shape == (2, 2, 3, 12)
    assert "down" not in bank["layers"][group]
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        LoRAConfig(targets=("qkv",))


def test_adapters_written_per_layer_restore_stacked_and_give_the_same_logits(tiny_qwen3, tmp_path):
    """An adapter bank saved in the per-layer list layout (before the layers were stacked)
    restores in the stacked layout, and runs the same as the stacked adapter it came from; a
    per-layer adapter handed to `forward` directly is one clear error."""
    import orbax.checkpoint as ocp

    _, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    cfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "v", "down"), top_layers=1)
    shapes = m.family.lora_shapes(m.config)
    bank = jax.tree.map(lambda x: x + 0.05, lora.init_lora(jax.random.PRNGKey(5), shapes, cfg, n_agents=2))
    old = {"layers": lora.to_layers(bank, shapes, agent_axis=True)}            # the old layout
    assert old["layers"][0] == {} and set(old["layers"][1]) == {"q", "v", "down"}
    (tmp_path / "old").mkdir()
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save((tmp_path / "old" / "adapters").absolute(), old, force=True)
    (tmp_path / "old" / "lora_config.json").write_text(json.dumps({**cfg.__dict__, "targets": list(cfg.targets)}))
    back, cfg2 = lora.restore(tmp_path / "old")
    assert cfg2 == cfg and jax.tree.structure(back) == jax.tree.structure(bank)
    tokens, mask = _batch(6)
    ours = m.logits(tokens, mask, lora=lora.agent(back, 1), lora_scale=cfg.scale)
    want = m.logits(tokens, mask, lora=lora.agent(bank, 1), lora_scale=cfg.scale)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(want))
    with pytest.raises(ValueError, match="per-layer list layout of adapters written before they were stacked; convert it with omjax.models.lora.from_layers"):
        m.family.forward(m.params, m.config, jnp.asarray(tokens), lora=lora.agent(old, 0))


def test_top_layers_bank_adapts_only_the_top_layers_with_the_full_banks_draws():
    shapes = [{"q": (8, 8), "v": (8, 4)}] * 3
    full = lora.init_lora(jax.random.PRNGKey(0), shapes, LoRAConfig(rank=2, targets=("q", "v")), n_agents=2)
    top = lora.init_lora(jax.random.PRNGKey(0), shapes, LoRAConfig(rank=2, targets=("q", "v"), top_layers=1), 2)
    assert lora.slots(top["layers"], shapes) == [None, None, ("q8x8_v8x4", 0)]
    assert lora.slots(full["layers"], shapes) == [("q8x8_v8x4", i) for i in range(3)]
    full_layers, top_layers = lora.to_layers(full, shapes, agent_axis=True), lora.to_layers(top, shapes, agent_axis=True)
    assert top_layers[:2] == [{}, {}]
    for x, y in zip(jax.tree.leaves(full_layers[2]), jax.tree.leaves(top_layers[2])):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(ValueError, match="lora.top_layers=4 but the backbone has 3 layers"):
        lora.init_lora(jax.random.PRNGKey(0), shapes, LoRAConfig(top_layers=4), 1)


def test_per_agent_menu_scoring_with_shared_prefix_equals_separate_calls(tiny_qwen3):
    """The letter policy over a bank (rows gather their adapter and its prefix cache) scores as
    each adapter alone on whole prompts, and decides the same letters."""
    from omjax.train.policy import LetterPolicy, make_branches, pack_branches

    _, path = tiny_qwen3
    m = load(path, dtype=jnp.float32, with_tokenizer=False)
    fam, cfg = m.family, m.config
    n_agents = 2
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "k", "v", "up"))
    bank = lora.init_lora(jax.random.PRNGKey(5), fam.lora_shapes(cfg), lcfg, n_agents)
    bank = jax.tree.map(lambda x: x + 0.05, bank)
    policy = LetterPolicy(fam, cfg, lcfg.scale, 1.0, remat=False)
    rng = np.random.RandomState(6)
    prefix = rng.randint(0, V, 5).tolist()
    suffixes = [rng.randint(0, V, n).tolist() for n in (4, 2, 6, 3)]
    agents = np.array([0, 1, 1, 0], np.int32)
    # One branch (a reply without a state line): the token after each prompt, where letters are scored.
    branches = [make_branches(_IdTokenizer(), (None,))] * 4
    block, segments, label_mask, end = pack_branches(branches, 4, 1, branches[0].width, 0)
    letters = np.broadcast_to(np.asarray([3, 9, 27, 81], np.int32), (4, 4))
    allowed = np.ones((4, 4), bool)
    allowed[0, 3] = allowed[2, :2] = False

    def inputs(seqs, length):
        t, mk = inference.left_pad(seqs, length=length)
        return {"tokens": np.concatenate([t, block], 1), "mask": np.concatenate([mk, segments], 1),
                "label_mask": label_mask, "end": end, "letters": letters, "menu_mask": allowed}

    whole = inputs([prefix + s for s in suffixes], 16)
    row = lambda j: jax.tree.map(lambda x: jnp.asarray(x[j:j + 1]), whole)
    alone = np.stack([np.asarray(jax.jit(policy.joint_logp)(m.params, lora.agent(bank, int(a)), row(j)))[0, 0]
                      for j, a in enumerate(agents)])                                    # [4, M]
    caches = policy.prefill(m.params, bank, prefix)
    part = jax.tree.map(lambda x: jnp.asarray(x[:, None]), inputs(suffixes, 8))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state, choice, lp, _ = policy.decide(m.params, bank, agents, part, keys, caches)
    whole_rows = jax.tree.map(lambda x: jnp.asarray(x[:, None]), whole)
    _, choice_whole, lp_whole, _ = policy.decide(m.params, bank, agents, whole_rows, keys)
    np.testing.assert_array_equal(choice, choice_whole)
    np.testing.assert_allclose(lp[:, 0], alone[np.arange(4), choice[:, 0]], atol=1e-4)
    np.testing.assert_allclose(lp, lp_whole, atol=1e-4)
    assert (state == 0).all() and allowed[np.arange(4), choice[:, 0]].all()
    np.testing.assert_allclose(np.exp(np.where(allowed, alone, -np.inf)).sum(-1), 1.0, atol=1e-5)


class _IdTokenizer:
    """`choice:` as token ids 1 2 (this test has no real tokenizer)."""

    @staticmethod
    def encode(text, add_special_tokens=False):
        return {"choice:": [1, 2]}[text]


def test_trunk_split_equals_full_forward(tiny_qwen3):
    from trunk_check import check_trunk_matches_full_forward

    _, path = tiny_qwen3
    check_trunk_matches_full_forward(load(path, dtype=jnp.float32, with_tokenizer=False), *_batch(4), n_frozen=1)
