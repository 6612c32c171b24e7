// Runs Gemini CLI's own ToolOutputMaskingService.mask, cut verbatim from the installed bundle, on a
// history read from stdin ({"history": [...], "tempDir": "...", "sessionId": "..."}, as the wire
// carries it), and prints the masked history as the CLI would send it: its ids get the CLI's own
// "<name>__" prefix first (as its stream handler gives every call) and lose it after, by the bundle's
// stripToolCallIdPrefixes. The tests check the proxy's rule (harness_gym/external/proxy/masking.py)
// against the CLI's code itself, not against a copy of it. Usage: node gemini_masking.mjs BUNDLE_DIR
import fs from "node:fs";
import path from "node:path";

const dir = process.argv[2];
const chunk = fs
  .readdirSync(dir)
  .filter((name) => name.endsWith(".js"))
  .map((name) => fs.readFileSync(path.join(dir, name), "utf8"))
  .find((text) => text.includes("var ToolOutputMaskingService = class"));
if (!chunk) throw new Error(`no ToolOutputMaskingService in ${dir}`);

function cut(start, end) {
  const from = chunk.indexOf(start);
  const to = chunk.indexOf(end, from);
  if (from < 0 || to < 0) throw new Error(`cannot find ${JSON.stringify(start)} in the bundle`);
  return chunk.slice(from, to);
}

const source = [
  cut("var ASCII_TOKENS_PER_CHAR =", "async function calculateRequestTokenCount"),
  cut("function sanitizeFilenamePart(", "function formatTruncatedToolOutput"),
  cut("var DEFAULT_TOOL_PROTECTION_THRESHOLD =", "var ToolOutputMaskingService = class"),
  cut("var ToolOutputMaskingService = class", "\n};\n") + "\n};\n",
  cut("function stripToolCallIdPrefixes(", "function coalesceConsecutiveRoles("),
].join("\n");
const names = {
  ACTIVATE_SKILL_TOOL_NAME: "activate_skill",
  ASK_USER_TOOL_NAME: "ask_user",
  ENTER_PLAN_MODE_TOOL_NAME: "enter_plan_mode",
  EXIT_PLAN_MODE_TOOL_NAME: "exit_plan_mode",
  SHELL_TOOL_NAME: "run_shell_command",
};
const modules = source.match(/\b(path\d+|fsPromises\d+)\b/g) ?? [];
const stubs = { debugLogger: { debug() {} }, logToolOutputMasking() {}, ToolOutputMaskingEvent: class {} };
const scope = { ...names, ...stubs };
for (const name of modules) scope[name] = name.startsWith("path") ? path : fs.promises;
const [Service, strip, defaults] = new Function(
  ...Object.keys(scope),
  `${source}\nreturn [ToolOutputMaskingService, stripToolCallIdPrefixes, { protectionThresholdTokens: DEFAULT_TOOL_PROTECTION_THRESHOLD,
    minPrunableThresholdTokens: DEFAULT_MIN_PRUNABLE_TOKENS_THRESHOLD, protectLatestTurn: DEFAULT_PROTECT_LATEST_TURN }];`,
)(...Object.values(scope));

function prefixed(contents) {
  for (const content of contents) {
    for (const part of content.parts ?? []) {
      const call = part.functionCall ?? part.functionResponse;
      const name = call?.name?.trim() || "generic_tool";
      if (call?.id && !call.id.startsWith(`${name}__`)) call.id = `${name}__${call.id}`;
    }
  }
  return contents;
}

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const config = {
  async getToolOutputMaskingConfig() {
    return defaults; // the CLI's defaults: no setting or experiment flag changes them offline
  },
  storage: { getProjectTempDir: () => input.tempDir },
  getSessionId: () => input.sessionId,
};
const result = await new Service().mask(prefixed(input.history), config);
process.stdout.write(JSON.stringify({ history: strip(result.newHistory), masked: result.maskedCount }));
