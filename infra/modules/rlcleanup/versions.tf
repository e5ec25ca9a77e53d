# The module declares the providers it needs and nothing else: the provider configuration (project, region,
# credentials) and the state backend belong to whoever instantiates it (infra/versions.tf here).
terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.40, < 7"
    }
  }
}
