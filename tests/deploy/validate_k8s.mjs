// Validates rendered Kubernetes objects against the upstream OpenAPI schema,
// offline, with npm's kubernetes-models and @kubernetes-models/prometheus-operator:
//   node validate_k8s.mjs NODE_MODULES_DIR OBJECTS.json OUT_DIR
// 1. each object's model validate() (ajv, compiled from the OpenAPI schema);
// 2. a strict unknown-field check: each object as an object literal typed with
//    its model's TypeScript interface (I<Kind>), compiled by tsc --noEmit:
//    TypeScript's excess-property check rejects any field the schema lacks.
// Prints one line per problem and exits 1 if there was any.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, objectsFile, outDir] = process.argv.slice(2);
const objects = JSON.parse(readFileSync(objectsFile, "utf8"));

// apiVersion + kind -> the model's module path under node_modules.
function modelPath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

const problems = [];
const ts = [];
for (const [i, obj] of objects.entries()) {
  const where = `${obj.kind}/${obj.metadata?.name} (${obj.__source})`;
  const { __source, ...clean } = obj;
  const mod = modelPath(obj.apiVersion, obj.kind);
  let Model;
  try {
    Model = (await import(pathToFileURL(path.join(modules, mod + ".js")).href))[obj.kind];
  } catch (e) {
    problems.push(`${where}: no model for ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  try {
    new Model(clean).validate();
  } catch (e) {
    problems.push(`${where}: ${e.message}`);
  }
  ts.push(`import type { I${obj.kind} as T${i} } from ${JSON.stringify(mod + ".js")};`);
  ts.push(`// ${where}\nexport const o${i}: T${i} = ${JSON.stringify(clean, null, 1)};`);
}

const file = path.join(outDir, "objects.ts");
writeFileSync(file, ts.join("\n") + "\n");
writeFileSync(path.join(outDir, "tsconfig.json"), JSON.stringify({
  compilerOptions: { strict: true, noEmit: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022",
                     skipLibCheck: true, typeRoots: [], baseUrl: modules, paths: { "*": [path.join(modules, "*")] } },
  files: [file],
}));
try {
  execFileSync(process.execPath, [path.join(modules, "typescript/bin/tsc"), "-p", path.join(outDir, "tsconfig.json")],
               { encoding: "utf8", stdio: "pipe" });
} catch (e) {
  const lines = ts.join("\n").split("\n");
  for (const line of (e.stdout || e.message).split("\n").filter((l) => l.includes("error TS"))) {
    // objects.ts(LINE,COL): ... -> the object whose literal holds LINE.
    const n = Number((line.match(/objects\.ts\((\d+),/) || [])[1] || 0);
    let owner = "";
    for (let k = Math.min(n, lines.length) - 1; k >= 0 && !owner; k--) {
      if (lines[k].startsWith("// ")) owner = lines[k].slice(3);
    }
    problems.push(`${owner || "?"}: tsc: ${line.replace(/^.*error TS\d+: /, "")}`);
  }
}
for (const p of problems) console.log(p);
console.log(`${objects.length} objects, ${problems.length} problems`);
process.exit(problems.length ? 1 : 0);
