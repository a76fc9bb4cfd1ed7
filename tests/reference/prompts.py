"""Fixed test prompts for reference-vs-engine comparisons.

Each prompt is a dict: ``name`` (stable id), ``text`` and ``chat`` (True: wrap
``text`` as the single user turn of the GGUF's ChatML template, with the
template's default system message and add_generation_prompt=True; False: raw
text, tokenised as-is without BOS).

Do not edit existing entries: recorded expectations are keyed by ``name``.
Append new prompts at the end instead.
"""

from __future__ import annotations

from typing import Dict, List

_LONG_STORY = (
    "Once upon a time, in a small village nestled between rolling green hills and a quiet river, "
    "there lived an old clockmaker named Elias. Every morning he opened the wooden shutters of his "
    "shop, swept the stone floor, and wound each of the hundred clocks that lined his walls. The "
    "villagers said that his clocks never lost a second, and travellers came from distant towns to "
    "buy them. One winter evening, as snow fell softly on the cobblestones, a young girl knocked on "
    "his door. She carried a broken pocket watch wrapped in a faded red cloth. It had belonged to her "
    "grandmother, she explained, and it had stopped on the night her grandmother died. Elias turned "
    "the watch over in his hands, opened its back with a tiny brass key, and peered at the gears "
    "inside. They were unlike anything he had ever seen: delicate silver wheels engraved with stars, "
    "and a spring that seemed to glow faintly in the lamplight. He told the girl to come back in "
    "three days. That night he did not sleep. He worked by candlelight, and as the first light of dawn"
)

_LONG_CODE = '''import heapq
from typing import Dict, List, Tuple


def dijkstra(graph: Dict[str, List[Tuple[str, int]]], source: str) -> Dict[str, int]:
    """Return the shortest distance from source to every reachable node."""
    dist = {source: 0}
    heap = [(0, source)]
    while heap:
        d, node = heapq.heappop(heap)
        if d > dist.get(node, float("inf")):
            continue
        for neighbour, weight in graph.get(node, []):
            nd = d + weight
            if nd < dist.get(neighbour, float("inf")):
                dist[neighbour] = nd
                heapq.heappush(heap, (nd, neighbour))
    return dist


if __name__ == "__main__":
    g = {
        "a": [("b", 4), ("c", 1)],
        "c": [("b", 2), ("d", 7)],
        "b": [("d", 1)],
    }
    print(dijkstra(g, "a"))
    # Expected output:
'''

PROMPTS: List[Dict[str, object]] = [
    # --- raw, short -------------------------------------------------------
    {"name": "raw_paris", "chat": False, "text": "The capital of France is"},
    {"name": "raw_count", "chat": False, "text": "1, 2, 3, 4, 5, 6,"},
    {"name": "raw_single_word", "chat": False, "text": "Hello"},
    {"name": "raw_arith", "chat": False, "text": "Question: What is 17 + 25?\nAnswer:"},
    {"name": "raw_list", "chat": False, "text": "Here are three tips for staying healthy:\n1."},
    {"name": "raw_def_python", "chat": False, "text": "def fibonacci(n):\n    "},
    {"name": "raw_french", "chat": False, "text": "Il était une fois, dans un petit village de montagne,"},
    {"name": "raw_digits", "chat": False, "text": "The year 1969 was when Apollo 11 landed on the Moon. The year 2024"},
    # --- raw, long (~200 tokens) -------------------------------------------
    {"name": "raw_long_story", "chat": False, "text": _LONG_STORY},
    {"name": "raw_long_code", "chat": False, "text": _LONG_CODE},
    # --- chat ----------------------------------------------------------------
    {"name": "chat_paris", "chat": True, "text": "What is the capital of France?"},
    {"name": "chat_hi", "chat": True, "text": "Hi!"},
    {"name": "chat_code", "chat": True,
     "text": "Write a Python function that checks whether a string is a palindrome."},
    {"name": "chat_math", "chat": True, "text": "If a train travels 120 km in 1.5 hours, what is its average speed?"},
    {"name": "chat_spanish", "chat": True, "text": "¿Cuál es el río más largo del mundo? Responde en español."},
    {"name": "chat_explain", "chat": True, "text": "Explain photosynthesis to a ten-year-old in three sentences."},
    {"name": "chat_long", "chat": True,
     "text": "Summarise the following story in two sentences.\n\n" + _LONG_STORY + " he finally understood."},
    {"name": "chat_json", "chat": True,
     "text": 'Return a JSON object with keys "name" and "age" for a person called Ada who is 36.'},
]


def prompt_ids(model_path: str, prompt: Dict[str, object]) -> List[int]:
    """Token ids for one prompt entry (uses tokenize_ref; no tpserve involved)."""
    from tokenize_ref import encode, encode_chat  # local import: keeps this module data-only

    if prompt["chat"]:
        return encode_chat(model_path, str(prompt["text"]))
    return encode(model_path, str(prompt["text"]))


def all_prompt_ids(model_path: str) -> Dict[str, List[int]]:
    return {str(p["name"]): prompt_ids(model_path, p) for p in PROMPTS}
