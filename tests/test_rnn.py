"""Tests of transformer_book.rnn: the Elman RNN against nn.RNN, the toy task, the seq2seq models."""

import pytest
import torch
from torch import nn
from transformer_book.rnn import (
    AdditiveAttention,
    ElmanRNN,
    Seq2Seq,
    copy_task_batch,
    token_accuracy,
    train_seq2seq,
)


def _torch_rnn_with_weights_of(rnn: ElmanRNN) -> nn.RNN:
    ref = nn.RNN(rnn.input_size, rnn.hidden_size, nonlinearity="tanh", batch_first=True)
    with torch.no_grad():
        ref.weight_ih_l0.copy_(rnn.U.T)  # nn.RNN computes x W_ih^T: W_ih = U^T
        ref.weight_hh_l0.copy_(rnn.W.T)
        ref.bias_ih_l0.copy_(rnn.b)
        ref.bias_hh_l0.zero_()
    return ref


def test_elman_rnn_equals_nn_rnn():
    torch.manual_seed(0)
    rnn = ElmanRNN(5, 7, 3)
    ref = _torch_rnn_with_weights_of(rnn)
    x = torch.randn(4, 9, 5)
    h0 = torch.randn(4, 7)
    o, h = rnn(x, h0)
    h_ref, h_last = ref(x, h0[None])
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(h[:, -1], h_last[0])
    torch.testing.assert_close(o, h_ref @ rnn.V)
    assert o.shape == (4, 9, 3)


def test_elman_rnn_gradients_equal_nn_rnn():
    torch.manual_seed(0)
    rnn = ElmanRNN(3, 6, 2)
    ref = _torch_rnn_with_weights_of(rnn)
    x = torch.randn(2, 12, 3, requires_grad=True)
    (g,) = torch.autograd.grad(rnn.hidden_states(x)[:, -1].sum(), x)
    (g_ref,) = torch.autograd.grad(ref(x)[0][:, -1].sum(), x)
    torch.testing.assert_close(g, g_ref)


def test_elman_rnn_is_causal():
    """Changing a later input leaves every earlier state unchanged."""
    torch.manual_seed(0)
    rnn = ElmanRNN(4, 8, 2)
    x = torch.randn(1, 10, 4)
    x2 = x.clone()
    x2[:, 6] += 1.0
    h, h2 = rnn.hidden_states(x), rnn.hidden_states(x2)
    torch.testing.assert_close(h[:, :6], h2[:, :6])
    assert not torch.allclose(h[:, 6:], h2[:, 6:])


def test_linear_elman_rnn_has_closed_form():
    torch.manual_seed(0)
    rnn = ElmanRNN(3, 4, 2, nonlinearity="identity")
    with torch.no_grad():
        rnn.b.zero_()
    x = torch.randn(1, 6, 3)
    expected = sum(x[0, t] @ rnn.U @ torch.linalg.matrix_power(rnn.W, 5 - t) for t in range(6))
    torch.testing.assert_close(rnn.hidden_states(x)[0, -1], expected)


@pytest.mark.parametrize(
    "shape, match",
    [((9, 5), r"\(B, L, input_size=5\)"), ((2, 9, 4), r"input_size=5"), ((2, 0, 5), "empty")],
)
def test_elman_rnn_rejects_bad_input(shape, match):
    rnn = ElmanRNN(5, 7, 3)
    with pytest.raises(ValueError, match=match):
        rnn(torch.randn(*shape))


def test_elman_rnn_rejects_bad_h0_and_arguments():
    rnn = ElmanRNN(5, 7, 3)
    with pytest.raises(ValueError, match="h0 must have shape"):
        rnn(torch.randn(2, 4, 5), torch.randn(1, 7))
    with pytest.raises(ValueError, match="nonlinearity"):
        ElmanRNN(5, 7, 3, nonlinearity="relu6")
    with pytest.raises(ValueError, match="hidden_size must be positive"):
        ElmanRNN(5, 0, 3)


def test_copy_task_batch():
    gen = torch.Generator().manual_seed(0)
    src, tgt_in, tgt_out = copy_task_batch(3, 5, 10, generator=gen)
    assert src.shape == tgt_in.shape == tgt_out.shape == (3, 5)
    assert src.dtype == torch.long and src.min() >= 1 and src.max() <= 9
    torch.testing.assert_close(tgt_out, src)
    assert (tgt_in[:, 0] == 0).all()
    torch.testing.assert_close(tgt_in[:, 1:], tgt_out[:, :-1])
    _, _, rev = copy_task_batch(3, 5, 10, reverse=True, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rev, src.flip(1))
    with pytest.raises(ValueError, match="vocab_size"):
        copy_task_batch(3, 5, 1)


def test_additive_attention_weights_and_context():
    torch.manual_seed(0)
    attn = AdditiveAttention(6, 5, 4)
    query, keys = torch.randn(2, 3, 6), torch.randn(2, 7, 5)
    context, weights = attn(query, keys)
    assert context.shape == (2, 3, 5) and weights.shape == (2, 3, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    # Against the formula of Bahdanau et al. for one query and one key, written out.
    s, h = query[1, 2], keys[1, 4]
    e = attn.score.weight[0] @ torch.tanh(attn.query_proj.weight @ s + attn.key_proj(h))
    scores = torch.stack([
        attn.score.weight[0] @ torch.tanh(attn.query_proj.weight @ s + attn.key_proj(keys[1, j]))
        for j in range(7)
    ])
    torch.testing.assert_close(torch.softmax(scores, 0)[4], weights[1, 2, 4])
    torch.testing.assert_close(scores[4], e)
    torch.testing.assert_close(context[1, 2], weights[1, 2] @ keys[1])


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_shapes_and_determinism(attention):
    torch.manual_seed(0)
    model = Seq2Seq(10, 8, 16, attention=attention).eval()
    src, tgt_in, _ = copy_task_batch(3, 6, 10, generator=torch.Generator().manual_seed(0))
    logits = model(src, tgt_in[:, :4])  # target may be shorter than the source
    assert logits.shape == (3, 4, 10)
    torch.testing.assert_close(model(src, tgt_in[:, :4]), logits)
    assert model.greedy_decode(src, 5).shape == (3, 5)
    if attention:
        _, weights = model(src, tgt_in, return_weights=True)
        assert weights.shape == (3, 6, 6)
    else:
        with pytest.raises(ValueError, match="attention=True"):
            model(src, tgt_in, return_weights=True)


@pytest.mark.parametrize("attention", [False, True])
def test_greedy_decode_equals_teacher_forcing_on_its_own_output(attention):
    """Step-by-step decoding must compute what the one-call decoder computes."""
    torch.manual_seed(0)
    model = Seq2Seq(10, 8, 16, attention=attention).eval()
    src, _, _ = copy_task_batch(4, 7, 10, generator=torch.Generator().manual_seed(1))
    pred = model.greedy_decode(src, 7)
    tgt_in = torch.cat([torch.zeros(4, 1, dtype=torch.long), pred[:, :-1]], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt_in).argmax(-1), pred)


def test_without_attention_decoder_sees_only_last_encoder_state():
    """The bottleneck: two sources with the same final encoder state give the same output."""
    torch.manual_seed(0)
    model = Seq2Seq(10, 8, 16, attention=False).eval()
    src, tgt_in, _ = copy_task_batch(2, 5, 10, generator=torch.Generator().manual_seed(0))
    states, last = model.encode(src)
    other_states = torch.randn_like(states)  # anything but the last state is ignored
    with torch.no_grad():
        a = model.decode(tgt_in, states, last)[0]
        b = model.decode(tgt_in, other_states, last)[0]
    torch.testing.assert_close(a, b)
    attn_model = Seq2Seq(10, 8, 16, attention=True).eval()
    states, last = attn_model.encode(src)
    with torch.no_grad():
        a = attn_model.decode(tgt_in, states, last)[0]
        b = attn_model.decode(tgt_in, torch.randn_like(states), last)[0]
    assert not torch.allclose(a, b)


def test_seq2seq_rejects_bad_tokens():
    model = Seq2Seq(10, 8, 16)
    src = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="torch.long"):
        model(src.float(), src)
    with pytest.raises(ValueError, match="outside 0 .. 9"):
        model(src * 10, src)
    with pytest.raises(ValueError, match="batch sizes differ"):
        model(src, src[:1])
    with pytest.raises(ValueError, match="empty"):
        model(src, src[:, :0])


@pytest.fixture
def one_thread():
    """Tiny recurrent models train faster on one thread, and the loss is then reproducible
    whatever the machine's core count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_attention_model_learns_copy_task_and_training_is_reproducible(one_thread):
    torch.manual_seed(0)
    model = Seq2Seq(6, 8, 24, attention=True)
    losses = train_seq2seq(model, 100, (2, 4), batch_size=32, lr=2e-2, seed=0)
    assert sum(losses[-5:]) / 5 < 0.1 * losses[0]
    assert token_accuracy(model, 4, num_sequences=64) > 0.85
    torch.manual_seed(0)
    again = Seq2Seq(6, 8, 24, attention=True)
    assert train_seq2seq(again, 5, (2, 4), batch_size=32, lr=2e-2, seed=0) == losses[:5]


def test_additive_attention_rejects_mismatched_batches_and_ranks():
    attn = AdditiveAttention(6, 5, 4)
    with pytest.raises(ValueError, match="same B"):
        attn(torch.randn(2, 3, 6), torch.randn(3, 7, 5))
    with pytest.raises(ValueError, match="same B"):
        attn(torch.randn(3, 6), torch.randn(2, 7, 5))
