#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora (fuzz/seeds/<target>/): small hand-written inputs in each
format, a few KB per target. Rerun after changing it: `python3 fuzz/make_seeds.py`. The OTLP
protobuf seeds need opentelemetry-proto (the test venv has it); without it they are kept as they are.
No shared data is copied: every seed is written here."""
import gzip
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent / "seeds"


def put(target, name, data):
    d = ROOT / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    elif not isinstance(data, bytes):
        data = json.dumps(data, ensure_ascii=False).encode()
    (d / name).write_bytes(data)


whowhen = {
    "history": [
        {"content": "Find the cheapest flight from A to B on May 3.", "role": "human"},
        {"content": "Plan: 1. search flights 2. compare prices.", "name": "Orchestrator (thought)", "role": "Orchestrator (thought)"},
        {"content": "Searched: flights cost 120 and 95.", "name": "WebSurfer", "role": "WebSurfer"},
        {"content": "The cheapest is 120.", "name": "Orchestrator (-> user)", "role": "Orchestrator (-> user)"},
    ],
    "question": "Cheapest flight A to B on May 3?",
    "ground_truth": "95",
    "is_corrected": False,
    "question_ID": "seed-1",
    "mistake_agent": "Orchestrator",
    "mistake_step": "3",
    "mistake_reason": "It picked the higher price.",
}
put("whowhen", "hand_crafted.json", whowhen)
alg = {
    "is_correct": False,
    "question": "What is 2+3?",
    "question_ID": "seed-2",
    "level": "1",
    "ground_truth": "5",
    "history": [
        {"content": "What is 2+3?", "role": "user", "name": "Computer_terminal"},
        {"content": "```python\nprint(2+3)\n```", "role": "assistant", "name": "Coder"},
        {"content": "exitcode: 0 (execution succeeded)\nCode output: 6", "role": "user", "name": "Computer_terminal"},
        {"content": "The answer is 6. TERMINATE", "role": "assistant", "name": "Verifier"},
    ],
    "mistake_agent": "Verifier",
    "mistake_step": 3,
    "mistake_reason": "Accepted a wrong output.",
    "system_prompt": {"Coder": "You write code.", "Verifier": "You check."},
}
put("whowhen", "algorithm_generated.json", alg)
put("whowhen", "odd_fields.json", {"history": [{"content": None, "role": "x"}, {"role": "y", "content": ["a", 1]}], "mistake_step": "-1", "mistake_agent": 7})

aegis = {
    "id": "GSM8K_seed_1",
    "metadata": {"framework": "agentverse", "benchmark": "GSM8K", "model": "m", "num_agents": 2, "task_type": "math"},
    "input": {
        "query": "Leon buys 3 sets at $78 and 2 chairs at $83. Fee 5%. Total?",
        "conversation_history": [
            {"step": 1, "agent_name": "RoleAssigner", "content": "1. An analyst. 2. A checker.", "phase": "initialization"},
            {"step": 2, "agent_name": "Solver", "content": "3*78 + 2*83 = 400; 5% fee = 20; total 420.", "phase": "solving"},
            {"step": 3, "agent_name": "Evaluator", "content": "Correct: 410.", "phase": "evaluation"},
        ],
        "final_output": "410",
    },
    "output": {"faulty_agents": [{"agent_name": "Evaluator", "error_type": "FM-1.1", "injection_strategy": "response_corruption"}]},
    "ground_truth": {"correct_answer": "420", "injected_agents": [{"agent_name": "Evaluator", "error_type": "FM-1.1", "injection_strategy": "response_corruption", "malicious_action_description": ""}], "is_injection_successful": True},
}
put("aegis", "sample.json", aegis)
a2 = json.loads(json.dumps(aegis))
a2["input"]["conversation_history"][1]["step"] = "2"
a2["output"]["faulty_agents"] = []
put("aegis", "string_step.json", a2)

chat = {
    "id": "chat-seed",
    "task": "Book a table",
    "outcome": "failure",
    "metadata": {"framework": "openai"},
    "messages": [
        {"role": "system", "content": "You are a planner."},
        {"role": "user", "content": "Book a table for 2 at 7pm."},
        {"role": "assistant", "name": "planner", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{\"people\": 2, \"time\": \"19:00\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "book", "content": "booked for 20:00"},
        {"role": "assistant", "name": "planner", "content": [{"type": "text", "text": "Booked for 7pm."}]},
    ],
}
put("chat", "openai_tools.json", chat)
put("chat", "bare_array.json", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
put("chat", "history.json", {"history": [{"role": "user", "content": "q"}, {"role": "assistant", "name": "a", "content": "r"}], "question": "q", "outcome": True})

native = {
    "format_version": 1, "id": "n-1", "task": "t", "outcome": "failure",
    "agents": [{"name": "a", "kind": "worker"}, {"name": "tool", "kind": "tool"}],
    "steps": [
        {"index": 0, "agent": "a", "content": "hello", "tool_calls": [{"name": "f", "arguments": "{}"}]},
        {"index": 1, "agent": "tool", "content": "result"},
    ],
    "labels": {"decisive": {"agent": "a", "step": 0}},
}
put("native", "trace.json", native)
put("native", "two.jsonl", json.dumps(native) + "\n" + json.dumps({**native, "id": "n-2"}) + "\n")
put("native", "minimal.json", {"format_version": 1, "id": "m", "steps": []})

# MAD (MAST): one record in the published layout, one with a null mode and a string trace_id.
mad = {
    "mas_name": "ChatDev", "llm_name": "GPT-4o", "benchmark_name": "ProgramDev", "trace_id": 0,
    "trace": {"key": "ChatDev_ProgramDev_GPT4o", "index": 0, "trajectory": "[INFO] Programmer: main.py\n"},
    "mast_annotation": {"1.1": 0, "2.2": 1, "3.3": 0},
}
put("mad", "sample.json", mad)
put("mad", "null_mode.json", {**mad, "trace_id": "7", "mast_annotation": {"1.1": None, "3.2": True}})

put("auto", "whowhen.json", whowhen)
put("auto", "aegis.jsonl", json.dumps(aegis) + "\n" + json.dumps(a2) + "\n")
put("auto", "mad.jsonl", json.dumps(mad) + "\n")
put("auto", "pretty_native.json", json.dumps(native, indent=2))
put("auto", "chat_bom.json", b"\xef\xbb\xbf" + json.dumps(chat["messages"][:2]).encode())
put("auto", "mixed.jsonl", json.dumps(native) + "\n{\"id\": \"broken\", \"steps\": [\n\n" + json.dumps(chat) + "\n")

# OTLP/JSON: two GenAI spans of one trace (an agent and its chat call) and an OpenInference span.
def kv(k, v):
    if isinstance(v, bool):
        return {"key": k, "value": {"boolValue": v}}
    if isinstance(v, int):
        return {"key": k, "value": {"intValue": str(v)}}
    if isinstance(v, float):
        return {"key": k, "value": {"doubleValue": v}}
    return {"key": k, "value": {"stringValue": v}}

tid = "ce78f7c36e0bb4fc1115fb6c84cd19aa"
spans = [
    {"traceId": tid, "spanId": "82626672b7c3a5db", "name": "invoke_agent planner", "kind": 1,
     "startTimeUnixNano": "1796093623000000000", "endTimeUnixNano": "1796093626000000000",
     "attributes": [kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.agent.name", "planner"),
                    kv("gen_ai.conversation.id", "conv-1")]},
    {"traceId": tid, "spanId": "239e5d32d99cd56d", "parentSpanId": "82626672b7c3a5db", "name": "chat gpt-4o-mini", "kind": 3,
     "startTimeUnixNano": "1796093623941799686", "endTimeUnixNano": "1796093625146799686",
     "attributes": [kv("gen_ai.operation.name", "chat"), kv("gen_ai.request.model", "gpt-4o-mini"),
                    kv("gen_ai.request.max_tokens", 512), kv("gen_ai.request.temperature", 0.0),
                    kv("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [{"type": "text", "content": "2+3?"}]}])),
                    kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "6"}], "finish_reason": "stop"}]))],
     "status": {"code": 2, "message": "wrong"}},
    {"traceId": tid, "spanId": "1111111111111111", "parentSpanId": "82626672b7c3a5db", "name": "tool", "kind": 1,
     "startTimeUnixNano": "1796093625200000000", "endTimeUnixNano": "1796093625300000000",
     "attributes": [kv("openinference.span.kind", "TOOL"), kv("tool.name", "calc"), kv("input.value", "2+3"), kv("output.value", "5")]},
]
req = {"resourceSpans": [{"resource": {"attributes": [kv("service.name", "seed-mas")]},
                          "scopeSpans": [{"scope": {"name": "seed", "version": "0.1"}, "spans": spans}]}]}
put("otlp", "genai.json", req)
try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    msg = json_format.ParseDict(req, trace_service_pb2.ExportTraceServiceRequest())
    pb = msg.SerializeToString()
    put("otlp", "genai.pb", pb)
    put("otlp", "genai.pb.gz", gzip.compress(pb, mtime=0))
except ImportError:
    print("opentelemetry-proto not installed: the protobuf seeds are left as they are")

put("json_extract", "fenced.txt", 'Here is my answer:\n```json\n{"agent": "Coder", "step": 2, "confidence": 0.8, "reason": "it printed 6"}\n```\nDone.')
put("json_extract", "prose.txt", 'I think {"agent": "Coder", "step": 2,} is it. Also [1, 2, 3] and {"a": True, "b": None}')
put("json_extract", "nested.txt", 'text {"outer": {"inner": [{"x": "}"}, "\\"{"]}} tail ``` unclosed fence {')
put("json_extract", "many.txt", " ".join('{"k": %d}' % i for i in range(70)))

loc = {"reason": "Step 2 says 6 where 2+3 is 5: the coder misread the output.", "agent": "Coder", "step": 2, "confidence": 0.9}
put("typed_answer", "location.txt", "\x00" + json.dumps(loc))
put("typed_answer", "location_fenced_length.txt", "\x01```json\n" + json.dumps({**loc, "error_mode": "F1"}) + "\n```")
put("typed_answer", "location_lenient.txt", "\x00" + '{"reason": "x", "agent": "A", "step": 3.0, "confidence": 1, } trailing')
det = {"implicit_failures": [{"error_step": "2", "error_agent": "Coder", "error_type": "information_loss", "error_description": "dropped the fee",
                              "error_evidence": "total 400", "severity": "high", "confidence": "medium"}],
       "summary": {"total_implicit_failures": 1, "overall_process_assessment": "one loss"}}
put("typed_answer", "detect.txt", "\x00" + json.dumps(det))
put("typed_answer", "two_candidates.txt", "\x00" + '{"agent": "A"} then ' + json.dumps(loc))

base = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
put("serve_request", "plain.json", base)
put("serve_request", "all_fields.json", {**base, "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7, "seed": 3, "stop": ["END"], "n": 1, "stream": True,
                                         "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "user", "content": "x"}]})
put("serve_request", "json_schema.json", {**base, "max_tokens": 64, "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": {
    "type": "object", "required": ["step", "reason"], "properties": {"reason": {"type": "string", "maxLength": 200}, "step": {"type": "integer", "minimum": 0, "maximum": 9},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}, "ref": {"$ref": "#/$defs/d"}}, "$defs": {"d": {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0}]}}}}}})
put("serve_request", "unsatisfiable.json", {**base, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}})
put("serve_request", "grammar.json", {**base, "grammar": 'root ::= "yes" | "no" | [a-c]{1,3} item*\nitem ::= ("x" [0-9])+'})
put("serve_request", "json_object.json", {**base, "response_format": {"type": "json_object"}, "max_tokens": 99999999999})

tools = [{"type": "function", "function": {"name": "add", "description": "adds", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
         {"type": "function", "function": {"name": "transfer_to_math", "parameters": {"type": "object", "properties": {}}}}]
hist = [{"role": "system", "content": "You triage."}, {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}]
put("serve_tools", "auto.bin", json.dumps({"messages": hist, "tools": tools}).encode() + b"\x00" + b'{"name": "add", "arguments": {"a": 1, "b": 2}}')
put("serve_tools", "required.bin", json.dumps({"messages": hist, "tools": tools, "tool_choice": "required"}).encode() + b"\x00" + b'[{"name": "add", "arguments": "{}"}, {"name": "transfer_to_math"}]')
put("serve_tools", "named.bin", json.dumps({"messages": hist, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "transfer_to_math"}}}).encode() + b"\x00" + b'{"name": "nope"}')
put("serve_tools", "none.bin", json.dumps({"messages": hist[:2], "tools": tools, "tool_choice": "none", "tool_calls": hist[2]["tool_calls"]}).encode() + b"\x00" + b"plain text")
