// The cache block of runnerpool_runner_class: whether the class's instances serve GitHub's cache
// protocol (actions/cache, the setup actions) from the deployment's bucket, and the per-repository
// limits the reconciler keeps the bucket to (least recently used over the limit, unused past the
// age). Stored with the class (declared.Cache); the reconciler carries the switch into the class's
// launch template version. See docs/cache.md.
package provider

import (
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/declared"
)

type cacheModel struct {
	Enabled            types.Bool   `tfsdk:"enabled"`
	RepositoryLimitGiB types.Int64  `tfsdk:"repository_limit_gib"`
	MaxAge             types.String `tfsdk:"max_age"`
}

func cacheBlock() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "The runner cache: the class's instances serve `actions/cache`, the setup actions' `cache:` inputs and " +
			"anything else built on `@actions/cache` from the deployment's own S3 bucket and the instance's disk, with GitHub's cache " +
			"scopes enforced by the reconciler (the instance role has no bucket access; every request is presigned for the run's " +
			"scope). Workflows do not change; when the cache cannot serve, the job falls back to GitHub's cache with a warning. " +
			"Absent: off. Changing it makes new launch template versions and rolls warm pools. See " +
			"[docs/cache.md](https://github.com/runnerpool/terraform-provider-runnerpool/blob/main/docs/cache.md).",
		Attributes: map[string]schema.Attribute{
			"enabled": schema.BoolAttribute{
				MarkdownDescription: "Whether the class's instances serve the cache. Defaults to `true` when the block is present.",
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
			},
			"repository_limit_gib": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Most a repository's caches may hold, in GiB (1-%d). Over it the least recently used "+
					"entries are evicted, in the bucket by the reconciler and on each instance's disk by the agent. Defaults to %d, "+
					"GitHub's own limit.", declared.MaxCacheRepositoryLimitGiB, declared.DefaultCacheRepositoryLimitGiB),
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(declared.DefaultCacheRepositoryLimitGiB),
				Validators: []validator.Int64{int64Between{what: "repository limit", min: 1, max: declared.MaxCacheRepositoryLimitGiB}},
			},
			"max_age": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("An entry not used within this Go duration (%s to %s) is evicted. Defaults to `%s` "+
					"(7 days, GitHub's own). The bucket's lifecycle rule is the backstop: set its expiration at least this long.",
					declared.FormatDuration(declared.MinCacheMaxAge), declared.FormatDuration(declared.MaxCacheMaxAge), declared.FormatDuration(declared.DefaultCacheMaxAge)),
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(declared.FormatDuration(declared.DefaultCacheMaxAge)),
				Validators:    []validator.String{durationBetween("cache max age", declared.MinCacheMaxAge, declared.MaxCacheMaxAge)},
				PlanModifiers: []planmodifier.String{durationByValue{}},
			},
		},
	}
}

func (c *cacheModel) toConfig() *declared.Cache {
	if c == nil {
		return nil
	}
	age, _ := time.ParseDuration(c.MaxAge.ValueString()) // validated at plan
	return &declared.Cache{Enabled: c.Enabled.ValueBool(), RepositoryLimitGiB: int(c.RepositoryLimitGiB.ValueInt64()), MaxAge: declared.Duration(age)}
}

// cacheValue is the block of a stored class, keeping the prior spelling of an equal age.
func cacheValue(c *declared.Cache, prior *cacheModel) *cacheModel {
	if c == nil {
		return nil
	}
	var was types.String
	if prior != nil {
		was = prior.MaxAge
	}
	return &cacheModel{
		Enabled:            types.BoolValue(c.Enabled),
		RepositoryLimitGiB: types.Int64Value(c.RepositoryLimit() >> 30),
		MaxAge:             durationValue(c.Age(), was),
	}
}
