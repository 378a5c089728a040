// A whole deepagents agent on airlock: the real createDeepAgent, a
// scripted fake chat model from @langchain/core (no network model), and
// every tool call served by a live airlock sandbox.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createDeepAgent } from "deepagents";
import { AIMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { AirlockSandbox } from "../dist/index.js";
import { socketPath } from "./env.mjs";

let backend;

// A message's text, whether its content is a string or content blocks.
function textOf(content) {
  if (typeof content === "string") return content;
  return content.map((b) => (typeof b === "string" ? b : (b.text ?? ""))).join("");
}
after(async () => {
  await backend?.close();
});

test("createDeepAgent writes a Python file, executes it and reads its output through airlock", async () => {
  backend = await AirlockSandbox.create({ socketPath, ttl: "10m", idleTimeout: "5m", labels: { suite: "sdk-deepagents-agent" } });
  const program = "import platform\nprint('answer', 6 * 7)\nprint('node', platform.node())\n";
  const model = fakeModel()
    .respondWithTools([{ name: "write_file", args: { file_path: "/home/user/answer.py", content: program }, id: "call-write" }])
    .respondWithTools([{ name: "execute", args: { command: "cd /home/user && python3 answer.py > out.txt 2>&1; cat out.txt" }, id: "call-exec" }])
    .respondWithTools([{ name: "read_file", args: { file_path: "/home/user/out.txt" }, id: "call-read" }])
    // The last turn quotes what read_file returned, so the final answer
    // can only be right if the tool call really went through airlock.
    .respond((messages) => {
      const read = [...messages].reverse().find((m) => ToolMessage.isInstance(m) && m.tool_call_id === "call-read");
      return new AIMessage(`The program printed: ${read ? textOf(read.content) : "nothing"}`);
    });

  const agent = createDeepAgent({ model, backend });
  const result = await agent.invoke({ messages: [{ role: "user", content: "Write answer.py, run it, and tell me what it printed." }] });

  const tools = Object.fromEntries(result.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, textOf(m.content)]));
  assert.match(tools["call-write"], /Successfully wrote to '\/home\/user\/answer.py'/);
  assert.match(tools["call-exec"], /answer 42\nnode sandbox\n/);
  assert.match(tools["call-exec"], /exit code 0/);
  assert.match(tools["call-read"], /answer 42/);
  const final = result.messages.at(-1);
  assert.ok(AIMessage.isInstance(final));
  assert.match(textOf(final.content), /The program printed: .*answer 42/s);

  // The file and its output are really in the sandbox.
  const [py, out] = await backend.downloadFiles(["/home/user/answer.py", "/home/user/out.txt"]);
  assert.equal(Buffer.from(py.content).toString(), program);
  assert.equal(Buffer.from(out.content).toString(), "answer 42\nnode sandbox\n");
});
