"""http_clients.py - the official `openai` client and `prometheus_client`'s parser against a running
minionsd (tests/http-clients.sh starts it). Argument: the HTTP base URL and the API key. Prints one
line per check, then "python: N passed, N failed"."""
import sys

import openai
from prometheus_client.parser import text_string_to_metric_families
import urllib.request

base, key = sys.argv[1], sys.argv[2]
passed = failed = 0


def check(desc, ok):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", desc)


client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
prompt = "In the beginning"

whole = client.completions.create(model="any", prompt=prompt, max_tokens=24, temperature=0)
check("completion: one choice with text", len(whole.choices) == 1 and whole.choices[0].text)
check("completion: usage", whole.usage.completion_tokens == 24 and whole.usage.prompt_tokens > 0)
check("completion: finish_reason length", whole.choices[0].finish_reason == "length")

pieces, finish, usage = [], None, None
for chunk in client.completions.create(model="any", prompt=prompt, max_tokens=24, temperature=0, stream=True):
    if chunk.choices:
        pieces.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    usage = chunk.usage or usage
check("completion stream: same text", "".join(pieces) == whole.choices[0].text)
check("completion stream: finish_reason and usage at the end", finish == "length" and usage.completion_tokens == 24)

msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who made the heaven?"}]
chat = client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0, seed=1)
check("chat: an assistant message", chat.choices[0].message.role == "assistant")
text = chat.choices[0].message.content
parts = []
for chunk in client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0, stream=True,
                                            stream_options={"include_usage": True}):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
    if chunk.usage:
        usage = chunk.usage
check("chat stream: same text", "".join(parts) == text)
check("chat stream: usage", usage.completion_tokens == chat.usage.completion_tokens)

lp = client.chat.completions.create(model="any", messages=msgs, max_tokens=4, temperature=0, logprobs=True,
                                    top_logprobs=2)
check("chat logprobs: one per token, two alternatives",
      len(lp.choices[0].logprobs.content) == lp.usage.completion_tokens
      and all(len(t.top_logprobs) == 2 for t in lp.choices[0].logprobs.content))

sampled = [client.completions.create(model="any", prompt=prompt, max_tokens=12, temperature=0.9, seed=7).choices[0].text
           for _ in range(2)]
check("sampling with a seed is reproducible", sampled[0] == sampled[1])

several = client.completions.create(model="any", prompt=[prompt, "DEVIL, n."], max_tokens=24, temperature=0, n=2)
check("n=2 over two prompts: four choices in order, each its prompt's greedy text",
      [c.index for c in several.choices] == [0, 1, 2, 3]
      and several.choices[0].text == several.choices[1].text == whole.choices[0].text
      and several.choices[2].text == several.choices[3].text != whole.choices[0].text)
texts = {}
for chunk in client.chat.completions.create(model="any", messages=msgs, max_tokens=16, temperature=0, n=2, stream=True):
    for c in chunk.choices:
        texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
check("chat stream with n=2: each choice's text", texts == {0: text, 1: text})

try:
    client.completions.create(model="any", prompt=prompt, max_tokens=4, n=17)
    check("n=17 is refused", False)
except openai.BadRequestError as e:
    check("n=17 is refused with a 400 naming n", e.status_code == 400 and "n" in str(e))

try:
    openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).models.list()
    check("a wrong key is refused", False)
except openai.AuthenticationError:
    check("a wrong key is refused", True)

models = client.models.list()
check("one model listed", len(models.data) == 1)

req = urllib.request.Request(base + "/metrics", headers={"Authorization": "Bearer " + key})
families = {f.name: f for f in text_string_to_metric_families(urllib.request.urlopen(req).read().decode())}
for name in ["minions_requests", "minions_generation_tokens", "minions_time_to_first_token_seconds",
             "minions_time_per_output_token_seconds", "minions_kv_blocks_used", "minions_requests_queued",
             "minions_spec_decode_num_drafts", "minions_spec_decode_num_accepted_tokens_per_pos",
             "minions_drafter_weight", "minions_spec_length"]:
    check("metrics: family " + name, name in families)
done = sum(s.value for s in families["minions_requests"].samples
           if s.labels.get("frontend") == "http" and s.labels.get("outcome") in ("stop", "length"))
check("metrics: the HTTP requests that ended are counted (%d)" % done, done == 15)
ttft = [s for s in families["minions_time_to_first_token_seconds"].samples if s.name.endswith("_count")]
check("metrics: a time to first token per request", ttft and ttft[0].value >= 15)

print("python: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
