// Validates objects with the validators that @kubernetes-models compiles from published schemas:
// kubernetes-models 5.x from Kubernetes 1.36.0's OpenAPI spec (with its enums and required
// fields), prometheus-operator and cert-manager from those projects' CRD schemas.
//   node validate_models.mjs MODULES_DIR < [{label, object}, ...]
// Prints one line per problem; exit 0 when all pass, 1 otherwise.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = join(process.argv[2], "node_modules");
const crdPackages = {
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  "cert-manager.io": "@kubernetes-models/cert-manager",
};

function moduleFile(apiVersion) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (crdPackages[group]) return join(modules, crdPackages[group], group, version);
  return join(modules, "kubernetes-models", ...(group ? [group, version] : [version]));
}

const input = JSON.parse(readFileSync(0, "utf8"));
const problems = [];
for (const { label, object } of input) {
  const where = `${label}: ${object.kind} ${object.metadata?.name ?? "?"}`;
  let Model;
  try {
    const file = join(moduleFile(String(object.apiVersion)), `${object.kind}.js`);
    Model = (await import(pathToFileURL(file).href))[object.kind];
  } catch {
    Model = undefined;
  }
  if (!Model) {
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
