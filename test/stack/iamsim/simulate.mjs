// simulate.mjs runs IAM requests through @cloud-copilot/iam-simulate, an IAM evaluator we did not
// write (it follows AWS's documented evaluation logic). Input on stdin, JSON:
//   {"policies": [{"name": "...", "policy": {...}}], "requests": [{"action", "resource", "principal",
//    "account", "context": {"key": "value" | ["values"]}, "resourcePolicy": {...} (optional)}]}
// Output on stdout, JSON: one {"decision": "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied",
// "errors": ...} per request, in order. iamsim.go runs it; the tests never see this file's details.
import { runSimulation } from '@cloud-copilot/iam-simulate'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const input = JSON.parse(Buffer.concat(chunks).toString('utf8'))

const out = []
for (const r of input.requests) {
  const response = await runSimulation(
    {
      identityPolicies: input.policies,
      ...(r.resourcePolicy ? { resourcePolicy: r.resourcePolicy } : {}),
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      request: {
        action: r.action,
        principal: r.principal,
        resource: { resource: r.resource, accountId: r.account },
        contextVariables: r.context ?? {}
      }
    },
    {}
  )
  if (response.resultType === 'error') {
    out.push({ decision: 'Error', errors: response.errors })
  } else {
    out.push({ decision: response.overallResult })
  }
}
process.stdout.write(JSON.stringify(out))
