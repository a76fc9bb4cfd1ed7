"""Text -> token ids for a SentencePiece-BPE GGUF (tokenizer.ggml.model "llama" with scores, as
Gemma's), without tpserve: Google's `sentencepiece` library, given a ModelProto assembled from
the GGUF's own tokens, scores and token types (BPE, byte fallback, whitespace escaped to U+2581,
no dummy prefix, no whitespace split, identity normalizer: what tokenizer.ggml.add_space_prefix
false and Gemma's tokenizer say). As llama.cpp and Hugging Face do, the file's control and
user-defined tokens (type 3 and 4: "<start_of_turn>", runs of spaces) are matched in the raw
text first, leftmost and longest, and sentencepiece encodes the text between them."""
from __future__ import annotations

import functools
import re
from typing import List

from sentencepiece import SentencePieceProcessor
from sentencepiece import sentencepiece_model_pb2 as spm_pb

from llama_ref import gguf_reader

TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 3, 4


@functools.lru_cache(maxsize=2)
def _load(path: str):
    r = gguf_reader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    scores = r.fields["tokenizer.ggml.scores"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    model = spm_pb.ModelProto()
    model.trainer_spec.model_type = spm_pb.TrainerSpec.BPE
    model.trainer_spec.byte_fallback = True
    model.trainer_spec.split_by_whitespace = False
    for key, field in (("unk_id", "unknown_token_id"), ("bos_id", "bos_token_id"),
                       ("eos_id", "eos_token_id"), ("pad_id", "padding_token_id")):
        setattr(model.trainer_spec, key, int(r.fields[f"tokenizer.ggml.{field}"].contents()))
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = False
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    for token, score, kind in zip(tokens, scores, types):
        piece = model.pieces.add()
        piece.piece, piece.score, piece.type = token, score, kind
    sp = SentencePieceProcessor(model_proto=model.SerializeToString())
    added = sorted({t for t, k in zip(tokens, types)
                    if k in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)}, key=len, reverse=True)
    ids = {t: i for i, t in enumerate(tokens)}
    return sp, re.compile("|".join(re.escape(a) for a in added)), ids


def encode(path: str, text: str) -> List[int]:
    """Raw text -> ids (no BOS)."""
    sp, added, ids = _load(path)
    out, pos = [], 0
    for match in added.finditer(text):
        if match.start() > pos:
            out += sp.encode(text[pos:match.start()])
        out.append(ids[match.group(0)])
        pos = match.end()
    if pos < len(text):
        out += sp.encode(text[pos:])
    return out
