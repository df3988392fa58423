// The quotas page: every limit (the deployment's instance cap, each runner class's, each
// repository's concurrent runners) with what it holds now and how many requests it refused. The
// dashboard is the operator's: it shows every repository's count, which the API never does.
package dashboard

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// QuotaRow is one limit as the quotas page shows it.
type QuotaRow struct {
	// Limit is the kind: repository_runners, deployment_instances or runner_class_instances.
	Limit string
	// Scope is what is limited: "deployment", a runner class, a repository (owner/repo).
	Scope string
	// Max is the limit (0: counted, not limited).
	Max       int
	Held      int
	Refused   int
	RefusedAt time.Time
}

type quotaRow struct {
	QuotaRow
	Percent int
	Full    bool
}

type quotasPage struct {
	Rows    []quotaRow
	Refused int
}

func (d *Dashboard) quotas(r *http.Request, q url.Values) (view, error) {
	if err := only(q); err != nil {
		return view{}, err
	}
	rows, err := d.o.Quotas(r.Context())
	if err != nil {
		return view{}, err
	}
	var p quotasPage
	for _, row := range rows {
		v := quotaRow{QuotaRow: row}
		if row.Max > 0 {
			v.Percent = min(100, row.Held*100/row.Max)
			v.Full = row.Held >= row.Max
		}
		p.Refused += row.Refused
		p.Rows = append(p.Rows, v)
	}
	order := map[string]int{"deployment_instances": 0, "runner_class_instances": 1, "repository_runners": 2}
	slices.SortFunc(p.Rows, func(a, b quotaRow) int {
		return cmp.Or(cmp.Compare(order[a.Limit], order[b.Limit]), strings.Compare(a.Scope, b.Scope))
	})
	return view{page: "quotas", title: "Quotas", data: p}, nil
}
