// Drives modu-server with @ag-ui/client's HttpAgent and checks every event received against
// @ag-ui/core's EventSchema; prints one JSON object with what it saw.
//
// Usage: NODE_PATH=<node_modules> node agui_client.cjs URL TOKEN APPROVAL_URL [THINKER_URL [FORECAST_URL]]
// (APPROVAL_URL: an agent whose tool needs approval, so its run ends with an interrupt;
// THINKER_URL: an agent that streams reasoning and tool-call arguments; FORECAST_URL: an agent
// with a structured output, which streams as the agent's state).
const { HttpAgent } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");
const { PROTOCOL_VERSION } = require("@ag-ui/core");

async function main() {
  const [url, token, approvalUrl, thinkerUrl, forecastUrl] = process.argv.slice(2);
  const agent = new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` }, threadId: "node-thread" });
  const out = { protocolVersion: PROTOCOL_VERSION, runs: [] };
  for (const [i, question] of ["Weather in Paris?", "And tomorrow?"].entries()) {
    agent.addMessage({ id: `user-${i}`, role: "user", content: question });
    const events = [];
    const invalid = [];
    const { result, newMessages } = await agent.runAgent(
      { runId: `node-run-${i}`, forwardedProps: { mcp: { servers: [] } } },
      {
        onEvent({ event }) {
          events.push(event);
          const parsed = EventSchema.safeParse(event);
          if (!parsed.success) invalid.push({ type: event.type, issues: parsed.error.issues });
        },
      },
    );
    out.runs.push({ types: events.map((e) => e.type), events, invalid, result, newMessages });
  }
  out.messages = agent.messages;

  const paused = new HttpAgent({ url: approvalUrl, headers: { Authorization: `Bearer ${token}` } });
  paused.addMessage({ id: "user-p", role: "user", content: "Weather?" });
  const pausedEvents = [];
  let outcome;
  await paused.runAgent(
    { runId: "node-paused" },
    {
      onEvent({ event }) {
        pausedEvents.push({ type: event.type, valid: EventSchema.safeParse(event).success });
      },
      onRunFinishedEvent(params) {
        outcome = params.outcome;
      },
    },
  );
  out.paused = { events: pausedEvents, outcome, pendingInterrupts: paused.pendingInterrupts };

  // The next run answers the interrupt in `resume` (AG-UI 1.0's interrupt/resume).
  const resumed = [];
  let resumedOutcome;
  const resumeEntries = paused.pendingInterrupts.map((i) => ({
    interruptId: i.id,
    status: "resolved",
    payload: { approved: true },
  }));
  const { result: resumedResult } = await paused.runAgent(
    { runId: "node-resumed", resume: resumeEntries },
    {
      onEvent({ event }) {
        const parsed = EventSchema.safeParse(event);
        resumed.push({ type: event.type, valid: parsed.success, runId: event.runId });
      },
      onRunFinishedEvent(params) {
        resumedOutcome = params.outcome;
      },
    },
  );
  out.resumed = {
    events: resumed,
    outcome: resumedOutcome,
    result: resumedResult,
    pendingInterrupts: paused.pendingInterrupts,
    roles: paused.messages.map((m) => m.role),
  };
  if (thinkerUrl) {
    const thinker = new HttpAgent({ url: thinkerUrl, headers: { Authorization: `Bearer ${token}` } });
    thinker.addMessage({ id: "user-t", role: "user", content: "Weather in Paris?" });
    const events = [];
    const invalid = [];
    const { newMessages } = await thinker.runAgent(
      { runId: "node-thinker" },
      {
        onEvent({ event }) {
          events.push(event);
          const parsed = EventSchema.safeParse(event);
          if (!parsed.success) invalid.push({ type: event.type, issues: parsed.error.issues });
        },
      },
    );
    out.thinker = { types: events.map((e) => e.type), invalid, newMessages };
  }
  if (forecastUrl) {
    const forecaster = new HttpAgent({ url: forecastUrl, headers: { Authorization: `Bearer ${token}` } });
    forecaster.addMessage({ id: "user-f", role: "user", content: "Weather in Paris?" });
    const invalid = [];
    const states = [];
    const { result } = await forecaster.runAgent(
      { runId: "node-forecast" },
      {
        onEvent({ event }) {
          const parsed = EventSchema.safeParse(event);
          if (!parsed.success) invalid.push({ type: event.type, issues: parsed.error.issues });
        },
        onStateChanged({ state }) {
          states.push(JSON.parse(JSON.stringify(state)));
        },
      },
    );
    out.forecast = { invalid, states, state: forecaster.state, result };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
