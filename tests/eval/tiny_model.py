"""A tiny random Llama on disk, loadable by `omjax.models.load` (no download)."""

from pathlib import Path


def write_tiny_llama(path: Path) -> Path:
    """Directory of a random 2-layer Llama with a word-level tokenizer and a chat template.

    Small enough that a whole PA-MAGRPO round on Overcooked runs in seconds; its vocabulary has
    the menu letters, the two-line reply words and JSON punctuation, so every interface's replies
    can be spelled (a random model mostly spells nonsense, which the interfaces must count).
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "<|im_start|>", "<|im_end|>"]
    words = specials + ["system", "user", "assistant", "state", "choice", "action", "args", "target", "wait"]
    words += [chr(ord("A") + i) for i in range(26)] + list("{}[]:,\"().") + [str(d) for d in range(10)]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        eos_token="<|im_end|>", bos_token="<s>",
                                        additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
        "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(path)
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


