// Validates objects of CRD kinds with the validators that @kubernetes-models compiles from the
// CRD projects' own schemas (prometheus-operator, cert-manager).
//   node validate_crds.mjs MODULES_DIR < [{label, object}, ...]
// Prints one line per problem; exit 0 when all pass, 1 otherwise.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = join(process.argv[2], "node_modules", "@kubernetes-models");
const packages = {
  "monitoring.coreos.com": "prometheus-operator",
  "cert-manager.io": "cert-manager",
};
const input = JSON.parse(readFileSync(0, "utf8"));
const problems = [];
for (const { label, object } of input) {
  const [group, version] = String(object.apiVersion).split("/");
  const where = `${label}: ${object.kind} ${object.metadata?.name ?? "?"}`;
  const file = join(modules, packages[group] ?? "-", group, version ?? "-", `${object.kind}.js`);
  let Model;
  try {
    const exports = await import(pathToFileURL(file).href);
    Model = exports[object.kind];
  } catch {
    problems.push(`${where}: no schema for ${object.kind} in ${object.apiVersion}`);
    continue;
  }
  try {
    new Model(object).validate();
  } catch (error) {
    const details = error.errors?.map((e) => `${e.instancePath || "/"} ${e.message}`) ?? [];
    problems.push(`${where}: ${details.length ? details.join("; ") : error.message}`);
  }
}
for (const line of problems) console.log(line);
process.exit(problems.length ? 1 : 0);
