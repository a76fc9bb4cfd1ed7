"""tpserve's tokenizers against Hugging Face `tokenizers`, and its chat templates against
jinja2, through `tpserve tokenize` (JSON lines on stdin/stdout; see
server/cli/tokenize_command.h).

Byte-level BPE: SmolLM2's GGUF, and the equivalent tokenizer.json built here from the GGUF
metadata. SentencePiece-style BPE: a Llama-2-style tokenizer (Prepend/Replace normalizer,
byte fallback, Strip decoder) trained here on the corpus.
"""
import json
import subprocess
import sys

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

N_STRINGS = 2500
SPM = "\u2581"


@pytest.fixture(scope="session")
def corpus_module(repo_root):
    sys.path.insert(0, str(repo_root / "bench"))
    import corpus  # bench/corpus.py: the one corpus generator
    return corpus


@pytest.fixture(scope="session")
def smollm_meta(smollm_gguf):
    from gguf import GGUFReader
    fields = GGUFReader(str(smollm_gguf)).fields
    return {
        "tokens": fields["tokenizer.ggml.tokens"].contents(),
        "types": fields["tokenizer.ggml.token_type"].contents(),
        "merges": fields["tokenizer.ggml.merges"].contents(),
        "template": fields["tokenizer.chat_template"].contents(),
    }


@pytest.fixture(scope="session")
def smollm_hf(smollm_meta):
    """SmolLM2's tokenizer rebuilt in HF tokenizers from the GGUF metadata."""
    vocab = {t: i for i, t in enumerate(smollm_meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in smollm_meta["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(smollm_meta["tokens"], smollm_meta["types"])
                            if ty == 3])
    return tok


@pytest.fixture(scope="session")
def smollm_specials(smollm_meta):
    return [t for t, ty in zip(smollm_meta["tokens"], smollm_meta["types"]) if ty == 3]


@pytest.fixture(scope="session")
def spm_tokenizer_json(tmp_path_factory, corpus_module):
    """A Llama-2-style SentencePiece BPE with byte fallback, trained on the corpus."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SPM),
                                           normalizers.Replace(" ", SPM)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPM, " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=3000, limit_alphabet=200, max_token_length=12,
                                  special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(corpus_module.generate(3000, seed=7), trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    base = len(vocab)
    for b in range(256):  # byte-fallback tokens as ordinary vocabulary entries, as Llama 2 has
        vocab[f"<0x{b:02X}>"] = base + b
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}}
    path = tmp_path_factory.mktemp("spm") / "tokenizer.json"
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return path


def run_tokenize(tpserve_bin, model, lines, *flags):
    """One `tpserve tokenize` run: JSON values in, JSON values out, one per line."""
    stdin = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    proc = subprocess.run([str(tpserve_bin), "tokenize", f"--model={model}", *flags],
                          input=stdin.encode(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = [json.loads(l) for l in proc.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    return out


def assert_same_ids(strings, ours, theirs, what):
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if bad:
        report = []
        for i in bad[:5]:
            a, b = ours[i], theirs[i]
            k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            report.append(f"string {i} {strings[i]!r}\n  first difference at id {k}: "
                          f"tpserve {a[max(0, k-3):k+4]} HF {b[max(0, k-3):k+4]}")
        pytest.fail(f"{what}: {len(bad)}/{len(strings)} strings differ\n" + "\n".join(report))


def test_smollm_gguf_matches_hf(tpserve_bin, smollm_gguf, smollm_hf, smollm_specials,
                                corpus_module, tmp_path):
    strings = corpus_module.generate(N_STRINGS, seed=1234, special_tokens=smollm_specials)
    theirs = [e.ids for e in smollm_hf.encode_batch(strings, add_special_tokens=False)]
    ours = run_tokenize(tpserve_bin, smollm_gguf, strings)
    assert_same_ids(strings, ours, theirs, "SmolLM2 GGUF")
    # The same tokenizer as tokenizer.json (the HF loader path).
    path = tmp_path / "tokenizer.json"
    smollm_hf.save(str(path))
    assert_same_ids(strings, run_tokenize(tpserve_bin, path, strings), theirs, "SmolLM2 json")
    # decode(encode(s)) == s, and decoding agrees with HF.
    decoded = run_tokenize(tpserve_bin, smollm_gguf, ours, "--decode")
    assert [i for i, (d, s) in enumerate(zip(decoded, strings)) if d != s] == []
    hf_decoded = smollm_hf.decode_batch(theirs, skip_special_tokens=False)
    assert decoded == hf_decoded
    skipped = run_tokenize(tpserve_bin, smollm_gguf, ours, "--decode", "--skip_special")
    assert skipped == smollm_hf.decode_batch(theirs, skip_special_tokens=True)


def test_sentencepiece_bpe_matches_hf(tpserve_bin, spm_tokenizer_json, corpus_module):
    hf = Tokenizer.from_file(str(spm_tokenizer_json))
    strings = corpus_module.generate(N_STRINGS, seed=99, special_tokens=["<s>", "</s>", "<unk>"])
    theirs = [e.ids for e in hf.encode_batch(strings, add_special_tokens=True)]
    ours = run_tokenize(tpserve_bin, spm_tokenizer_json, strings, "--add_special")
    assert_same_ids(strings, ours, theirs, "SentencePiece BPE")
    byte_tokens = sum(1 for ids in ours for i in ids if hf.id_to_token(i).startswith("<0x"))
    assert byte_tokens > 100, "the corpus should exercise byte fallback"
    decoded = run_tokenize(tpserve_bin, spm_tokenizer_json, ours, "--decode")
    assert decoded == hf.decode_batch(theirs, skip_special_tokens=False)
    skipped = run_tokenize(tpserve_bin, spm_tokenizer_json, ours, "--decode", "--skip_special")
    assert skipped == hf.decode_batch(theirs, skip_special_tokens=True)
    # Round trip wherever the text has no special token (each segment gets its own "▁").
    plain = [i for i, s in enumerate(strings) if not any(t in s for t in ("<s>", "</s>", "<unk>"))]
    assert len(plain) > N_STRINGS // 2
    assert [i for i in plain if skipped[i] != strings[i]] == []


# Chat templates ----------------------------------------------------------------------------

def render_jinja(template, messages, bos, eos):
    """As transformers' apply_chat_template renders (add_generation_prompt=True)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                                add_generation_prompt=True)
    except jinja2.exceptions.TemplateError as e:  # includes UndefinedError
        return {"error": str(e)}


def conversations(corpus_module, n, seed):
    import random
    rng = random.Random(seed)
    texts = corpus_module.generate(400, seed=seed)
    out = [[]]
    for _ in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(texts)})
        for i in range(rng.randint(1, 5)):
            msgs.append({"role": "user" if i % 2 == 0 else "assistant",
                         "content": rng.choice(texts)})
        if rng.random() < 0.1:  # out of order: templates that check alternation reject it
            rng.shuffle(msgs)
        out.append(msgs)
    return out


@pytest.mark.parametrize("name", ["smollm2", "llama2", "llama3", "mistral"])
def test_chat_template_renders_like_jinja(name, tpserve_bin, smollm_gguf, smollm_meta,
                                          corpus_module, repo_root, tmp_path):
    if name == "smollm2":
        template, flags = smollm_meta["template"], []
    else:
        path = repo_root / "tests" / "integration" / "data" / "chat_templates" / f"{name}.jinja"
        template, flags = path.read_text(encoding="utf-8"), [f"--chat_template={path}"]
    convs = conversations(corpus_module, 300, seed=len(name))
    # bos/eos: the SmolLM2 tokenizer's pieces, which tpserve substitutes too.
    expected = [render_jinja(template, c, "<|im_start|>", "<|im_end|>") for c in convs]
    ours = run_tokenize(tpserve_bin, smollm_gguf, convs, "--chat", "--render", *flags)
    errors = 0
    for conv, want, got in zip(convs, expected, ours):
        if isinstance(want, dict):
            errors += 1
            assert isinstance(got, dict) and "error" in got, (conv, got)
        else:
            assert got == want, f"{conv!r}\n tpserve {got!r}\n jinja   {want!r}"
    assert len(convs) - errors >= 100, f"only {len(convs) - errors} conversations rendered"


def test_smollm_chat_ids_match_hf(tpserve_bin, smollm_gguf, smollm_meta, smollm_hf,
                                  corpus_module):
    convs = conversations(corpus_module, 100, seed=5)
    prompts = [render_jinja(smollm_meta["template"], c, "<|im_start|>", "<|im_end|>")
               for c in convs]
    ours = run_tokenize(tpserve_bin, smollm_gguf, convs, "--chat")
    assert ours == [smollm_hf.encode(p, add_special_tokens=False).ids for p in prompts]
    # The default system prompt comes from the template text.
    assert "named SmolLM" in prompts[1] or convs[1][0]["role"] == "system"


def test_bad_lines_are_reported_and_the_rest_go_on(tpserve_bin, smollm_gguf):
    out = run_tokenize(tpserve_bin, smollm_gguf, [[{"role": "tool", "content": "x"}],
                                                  [{"role": "user", "content": "hi"}], "text"],
                       "--chat", "--render")
    assert "tool" in out[0]["error"]
    assert out[1].endswith("<|im_start|>assistant\n")
    assert "error" in out[2]
    out = run_tokenize(tpserve_bin, smollm_gguf, [[1, 2, 49152], [19556, 905]], "--decode")
    assert "49152" in out[0]["error"] and out[1] == "Hello world"


def test_unknown_model_file_fails(tpserve_bin, tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "Unigram", "vocab": []}}')
    proc = subprocess.run([str(tpserve_bin), "tokenize", f"--model={bad}"], input=b"",
                          capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"Unigram" in proc.stderr
