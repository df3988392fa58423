// Phase 3: the orphan sweep. An instance launched by this deployment (it carries the deployment
// tag) that has no live record is an orphan: a crash between CreateFleet and writing the records, a
// record terminated while TerminateInstances failed, a record lost. Nothing may run unseen (DESIGN
// rule 2): the sweep terminates it. Instances without this deployment's tag are never touched,
// whatever else they carry.

package refresh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/store"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/tags"
	"github.com/runnerpool/terraform-provider-runnerpool/internal/terminate"
)

type taggedInstance struct {
	id       string
	launched time.Time // zero when EC2 did not say
}

// orphans runs the sweep and returns the ids of this deployment's instances that have no live
// record (terminated here, or unknown to EC2 by now): phase 4 treats their runners as leftovers.
func (r *Refresher) orphans(ctx context.Context, p *pass) map[string]bool {
	tagged, err := r.describeTagged(ctx)
	if err != nil {
		p.fail(PhaseOrphans, fmt.Errorf("listing instances tagged %s=%s: %w", tags.Deployment, r.opts.DeploymentID, err))
		return nil
	}
	p.update(func(rep *Report) { rep.Orphans.Tagged = len(tagged) })
	if len(tagged) == 0 {
		return nil
	}
	// Listed after EC2, so a record written before the listing is seen. An instance launched after
	// its fleet call but before its record was written is protected by the grace period.
	live, err := r.st.Live(ctx)
	if err != nil {
		p.fail(PhaseOrphans, fmt.Errorf("listing live records (sweep skipped: without them every instance looks orphaned): %w", err))
		return nil
	}
	liveIDs := make(map[string]store.Instance, len(live))
	for _, rec := range live {
		liveIDs[rec.ID] = rec
	}
	p.live = liveIDs

	var suspects []taggedInstance
	for _, in := range tagged {
		if _, ok := liveIDs[in.id]; ok {
			continue
		}
		if in.launched.IsZero() || p.now.Sub(in.launched) < r.opts.OrphanGrace {
			p.update(func(rep *Report) { rep.Orphans.Young = append(rep.Orphans.Young, in.id) })
			continue
		}
		suspects = append(suspects, in)
	}
	// The listing reads indexes, which lag behind writes: confirm each suspect with a consistent read.
	var orphans []string
	forEach(r.opts.Concurrency, suspects, func(in taggedInstance) {
		rec, err := r.st.Get(ctx, in.id)
		switch {
		case err == nil && rec.State.Live():
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			p.fail(PhaseOrphans, fmt.Errorf("confirming orphan %s (left running): %w", in.id, err))
			return
		}
		p.update(func(*Report) { orphans = append(orphans, in.id) })
	})
	if len(orphans) == 0 {
		return nil
	}
	slices.Sort(orphans)
	r.log.InfoContext(ctx, "refresh: terminating orphans", "deployment", r.opts.DeploymentID, "instances", orphans)

	res := terminate.Batches(ctx, r.ec2, orphans, r.opts.BatchSize)
	for _, err := range res.Errs {
		p.fail(PhaseOrphans, err)
	}
	dead := map[string]bool{}
	for _, id := range append(res.Done, res.Gone...) {
		dead[id] = true
	}
	p.update(func(rep *Report) {
		rep.Orphans.TerminateCalls += res.Calls
		rep.Orphans.Terminated = append(rep.Orphans.Terminated, res.Done...)
	})
	return dead
}

// describeTagged lists the not-yet-terminated instances carrying this deployment's tag, all pages.
func (r *Refresher) describeTagged(ctx context.Context) ([]taggedInstance, error) {
	pg := ec2.NewDescribeInstancesPaginator(r.ec2, &ec2.DescribeInstancesInput{
		Filters: []types.Filter{
			{Name: aws.String("tag:" + tags.Deployment), Values: []string{r.opts.DeploymentID}},
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
		},
		MaxResults: aws.Int32(1000),
	})
	var out []taggedInstance
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, res := range page.Reservations {
			for _, in := range res.Instances {
				// EC2 filter values are patterns ('*' and '?' match): check the tag exactly, so a
				// deployment id with wildcard characters can never reach another deployment.
				if !hasTag(in.Tags, tags.Deployment, r.opts.DeploymentID) {
					continue
				}
				out = append(out, taggedInstance{id: aws.ToString(in.InstanceId), launched: aws.ToTime(in.LaunchTime)})
			}
		}
	}
	return out, nil
}

func hasTag(ts []types.Tag, key, value string) bool {
	for _, t := range ts {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value) == value
		}
	}
	return false
}
