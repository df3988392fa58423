// Command terraform-provider-runnerpool is the Terraform provider binary. Terraform starts it as a
// plugin (protocol 6); `-debug` runs it for debuggers (TF_REATTACH_PROVIDERS).
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/runnerpool/terraform-provider-runnerpool/internal/version"
	"github.com/runnerpool/terraform-provider-runnerpool/provider"
)

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider with support for debuggers like delve")
	flag.Parse()

	err := providerserver.Serve(context.Background(), provider.New(version.Version), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
