// Evaluates CEL expressions with @marcbachmann/cel-js (optional types on, variables dynamic):
//   node evaluate_cel.mjs MODULES_DIR < [{expression, variables}, ...]
// Prints a JSON list with {value} or {error} per expression, in order.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const entry = join(process.argv[2], "node_modules", "@marcbachmann", "cel-js", "lib", "index.js");
const { Environment } = await import(pathToFileURL(entry).href);
const environment = new Environment({ unlistedVariablesAreDyn: true, enableOptionalTypes: true });
const results = [];
for (const { expression, variables } of JSON.parse(readFileSync(0, "utf8"))) {
  try {
    const value = environment.evaluate(expression, variables);
    results.push({ value: typeof value === "bigint" ? Number(value) : value });
  } catch (error) {
    results.push({ error: String(error.message ?? error) });
  }
}
console.log(JSON.stringify(results));
