"""PA-MAGRPO numeric core against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np

from omjax.train import grpo


def test_group_advantages_match_hand_computation():
    adv, zero = grpo.group_advantages(jnp.array([0.0, 20.0, 20.0, 40.0]))
    # mean 20, population std sqrt((400 + 0 + 0 + 400) / 4) = sqrt(200)
    s = np.sqrt(200.0)
    np.testing.assert_allclose(adv, [-20 / s, 0.0, 0.0, 20 / s], rtol=1e-6)
    assert not bool(zero)


def test_zero_spread_cohort_gives_zero_advantage_not_nan():
    adv, zero = grpo.group_advantages(jnp.array([20.0, 20.0, 20.0]))
    assert bool(zero)
    np.testing.assert_array_equal(adv, [0.0, 0.0, 0.0])


def test_clipped_surrogate_hand_values():
    old = jnp.log(jnp.array([0.5, 0.5, 0.5, 0.5]))
    new = jnp.log(jnp.array([0.75, 0.25, 0.75, 0.25]))  # ratios 1.5, 0.5, 1.5, 0.5
    adv = jnp.array([1.0, 1.0, -1.0, -1.0])
    loss, ratio, clipped = grpo.clipped_surrogate(new, old, adv, 0.2)
    np.testing.assert_allclose(ratio, [1.5, 0.5, 1.5, 0.5], rtol=1e-6)
    # A>0: min(1.5, 1.2)=1.2 ; min(0.5, 0.8)=0.5 ; A<0: min(-1.5,-1.2)=-1.5 ; min(-0.5,-0.8)=-0.8
    np.testing.assert_allclose(loss, [-1.2, -0.5, 1.5, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(clipped, [True, False, False, True])


def test_kl_exact_matches_hand_value_and_ignores_padding_slots():
    p = jnp.log(jnp.array([[0.5, 0.5, 1.0]]))
    q = jnp.log(jnp.array([[0.25, 0.75, 1.0]]))
    mask = jnp.array([[True, True, False]])
    want = 0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75)
    np.testing.assert_allclose(grpo.kl_exact(p, q, mask), [want], rtol=1e-6)
    np.testing.assert_array_equal(grpo.kl_exact(p, p, mask), [0.0])


def test_kl_k3_is_zero_at_equality_and_positive_otherwise():
    lp = jnp.array([[-0.1, -2.0, -5.0]])
    mask = jnp.array([[True, True, False]])
    np.testing.assert_array_equal(grpo.kl_k3(lp, lp, mask), [0.0])
    ref = jnp.array([[-0.3, -1.0, 0.0]])
    d = np.array([-0.2, 1.0])
    np.testing.assert_allclose(grpo.kl_k3(lp, ref, mask), [np.sum(np.exp(d) - d - 1)], rtol=1e-6)


def test_masked_mean_ignores_padding_and_handles_empty():
    x = jnp.array([1.0, 3.0, 100.0])
    np.testing.assert_allclose(grpo.masked_mean(x, jnp.array([True, True, False])), 2.0)
    assert float(grpo.masked_mean(x, jnp.zeros(3, bool))) == 0.0


def test_letter_marginal_kl_sees_letter_habits_not_menu_reading():
    import itertools

    sizes = np.array([3, 3, 2])  # menu entries of three decisions, M = 3 slots
    mask = np.arange(3)[None, :] < sizes[:, None]  # [3, 3]
    valid = np.array([True, True, True])
    log = lambda p: jnp.log(jnp.where(mask, jnp.asarray(p, jnp.float32), 1.0))
    # Uniform over each menu: m = u, KL 0.
    uniform = np.where(mask, 1.0 / sizes[:, None], 0.0)
    assert abs(float(grpo.letter_marginal_kl(log(uniform), mask, valid))) < 1e-6
    # Always letter A: m = (1, 0, 0), u = (7/18, 7/18, 4/18), KL = log(18/7).
    habit = np.where(mask, np.eye(3)[[0, 0, 0]], 0.0)
    np.testing.assert_allclose(float(grpo.letter_marginal_kl(log(habit), mask, valid)), np.log(18 / 7), rtol=1e-5)
    # A menu reader that always picks the same option, over all six letterings of a 3-entry
    # menu: its letter marginal is uniform, so the term is 0.
    perms = list(itertools.permutations(range(3)))
    reader = np.stack([np.eye(3)[p.index(0)] for p in perms])  # option 0 sits at letter p.index(0)
    m6 = np.ones((6, 3), bool)
    assert abs(float(grpo.letter_marginal_kl(jnp.log(jnp.where(m6, reader, 1e-30)), m6, np.ones(6, bool)))) < 1e-5
    # Padding rows count for nothing.
    padded = np.concatenate([habit, uniform[:1]])
    pmask = np.concatenate([mask, mask[:1]])
    np.testing.assert_allclose(
        float(grpo.letter_marginal_kl(jnp.log(jnp.where(pmask, padded, 1.0)), pmask, np.array([1, 1, 1, 0], bool))),
        np.log(18 / 7), rtol=1e-5)


def test_target_kl_is_zero_at_the_regularised_optimum_and_its_gradient_does_not_vanish():
    """KL(pi* || pi), pi* ∝ pi_ref exp(A / beta): zero when pi is pi* (padding ignored), and its
    logit gradient is pi - pi*, so a good slot the policy gives 1.2e-4 of its mass is pulled by
    pi*'s share of it, where the clipped surrogate's pull, pi (A - pi.A), is 100x weaker."""
    rng = np.random.default_rng(1)
    mask = jnp.array([[True] * 5, [True] * 3 + [False] * 2])
    ref = jax.nn.log_softmax(jnp.where(mask, jnp.asarray(rng.normal(size=(2, 5))), -1e9), axis=-1)
    adv = jnp.asarray(rng.normal(size=(2, 5)))
    beta = 0.5
    star = jax.nn.log_softmax(jnp.where(mask, ref + adv / beta, -1e9), axis=-1)
    np.testing.assert_allclose(grpo.target_kl(star, ref, mask, adv, beta), 0.0, atol=1e-6)
    assert (grpo.target_kl(ref, ref, mask, adv, beta) > 0.01).all()
    logits = jnp.array([[9.0, 0.0, 0.0, 0.0, 0.0]])  # slot 0 holds 0.9995 of the mass, the others 1.2e-4 each
    a1 = jnp.array([[-1.0, 0.0, 0.0, 0.0, 2.0]])
    ref1, one = jax.nn.log_softmax(logits), jnp.ones((1, 5), bool)
    g_target = jax.grad(lambda z: grpo.target_kl(jax.nn.log_softmax(z), ref1, one, a1, beta).sum())(logits)
    # The clipped surrogate's gradient at pi_old = pi, in expectation over the draw: that of -E_pi[A].
    g_clip = jax.grad(lambda z: -jnp.sum(jax.nn.softmax(z) * a1))(logits)
    pi_star = jax.nn.softmax(logits + a1 / beta)
    np.testing.assert_allclose(g_target, jax.nn.softmax(logits) - pi_star, rtol=1e-5, atol=1e-6)
    # pi*(4) = e^4 / (e^7 + 3 + e^4) = 0.047: pulled by ~0.047, against 1.2e-4 x (2 + 1) = 3.7e-4.
    assert float(-g_target[0, 4]) > 0.04 and 0 < float(-g_clip[0, 4]) < 1e-3
