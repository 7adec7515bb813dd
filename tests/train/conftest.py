import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A random 2-layer Llama built with transformers, with a word-level tokenizer and chat
    template, loaded through `omjax.models.load` (no download)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from omjax.models import load

    special = ["<pad>", "<unk>", "<s>", "<|im_start|>", "<|im_end|>"]
    words = special + ["system", "user", "assistant"] + [chr(65 + i) for i in range(26)]
    words += "state choice : ) ( , . pick option wait pay drop now menu you are agent player".split()
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>", bos_token="<s>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
    path = tmp_path_factory.mktemp("tiny_llama")
    tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return load(path)
